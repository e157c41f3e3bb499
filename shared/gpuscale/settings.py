"""Declarative settings: every option is a CLI flag and an environment variable.

Flag over environment over default; every bad value is reported at once, and the CLI exits 2."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from gpuscale.timefmt import parse_duration

T = TypeVar("T")
S = TypeVar("S")

Parser = Callable[[str], Any]


class SettingsError(ValueError):
    """One or more options are bad. ``problems`` holds (flag, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{flag}: {msg}" for flag, msg in problems))

    def lines(self) -> list[str]:
        return [f"invalid option {flag}: {msg}" for flag, msg in self.problems]


@dataclass(frozen=True, slots=True)
class OptionSpec:
    flag: str
    env: tuple[str, ...]
    parse: Parser
    help: str
    metavar: str | None
    is_flag: bool  # a switch without a value (--dry-run)


def option(
    default: T,
    flag: str,
    *,
    env: str | tuple[str, ...] | None = None,
    parse: Parser = str,
    help: str = "",  # noqa: A002 - mirrors argparse's own keyword
    metavar: str | None = None,
    is_flag: bool = False,
) -> T:
    envs = (env,) if isinstance(env, str) else tuple(env or ())
    spec = OptionSpec(flag, envs, parse, help, metavar, is_flag)
    field: T = dataclasses.field(default=default, metadata={"option": spec})
    return field


def _specs(cls: type[Any]) -> list[tuple[dataclasses.Field[Any], OptionSpec]]:
    return [(f, f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata]


def add_arguments(parser: argparse.ArgumentParser, cls: type[Any]) -> None:
    for f, spec in _specs(cls):
        env_note = f" [env: {', '.join(spec.env)}]" if spec.env else ""
        default = f.default if f.default is not dataclasses.MISSING else None
        is_duration = spec.parse is seconds
        shown = _show(default) + (" s" if is_duration and default is not None else "")
        # A help text that already explains its default is not followed by a second one.
        default_note = "" if "default" in spec.help else f" (default: {shown})"
        help_text = f"{spec.help}{default_note}{env_note}"
        if not spec.flag.startswith("-"):  # a positional argument (``gpuscale convert FILE``), required
            if spec.flag != f.name:
                raise ValueError(f"positional option {spec.flag!r} must be named like its field {f.name!r}")
            parser.add_argument(spec.flag, metavar=spec.metavar or spec.flag.upper(), help=spec.help)
        elif spec.is_flag:
            parser.add_argument(
                spec.flag, dest=f.name, action="store_const", const="true", default=None, help=help_text
            )
        else:
            parser.add_argument(
                spec.flag,
                dest=f.name,
                default=None,
                metavar=spec.metavar or _metavar(spec, is_duration),
                help=help_text,
            )


def _metavar(spec: OptionSpec, is_duration: bool) -> str:
    choices = getattr(spec.parse, "choices", None)
    if choices:
        return "{" + ",".join(choices) + "}"
    return "SECONDS" if is_duration else spec.flag.lstrip("-").upper().replace("-", "_")


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def build(
    cls: type[S], args: argparse.Namespace | Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> S:
    """Flag, else environment, else default; each parsed and checked."""
    environ = os.environ if environ is None else environ
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for f, spec in _specs(cls):
        raw: Any = given.get(f.name)
        source = spec.flag
        if raw is None:
            for name in spec.env:
                if environ.get(name, "") != "":
                    raw, source = environ[name], f"{spec.flag} (from ${name})"
                    break
        if raw is None:
            continue
        try:
            values[f.name] = spec.parse(raw) if isinstance(raw, str) else raw
        except (ValueError, TypeError) as e:
            problems.append((source, f"{e} (got {raw!r})"))
    if problems:
        raise SettingsError(problems)
    try:
        settings = cls(**values)
    except ValueError as e:  # cross-field checks in __post_init__
        raise SettingsError([("settings", str(e))]) from None
    return settings


# --- value parsers: each raises ValueError with a short reason ----------------


def seconds(text: str) -> float:
    """``30``, ``30s``, ``1.5``, ``500ms``, ``2m``: a duration, > 0 (gpuscale.timefmt)."""
    return parse_duration(text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if value <= 0:
        raise ValueError("must be greater than zero")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if value < 0:
        raise ValueError("must not be negative")
    return value


_BYTE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_BYTE_UNITS |= {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def byte_size(text: str) -> int:
    """``2GiB``, ``512MiB``, ``1GB``, ``1048576``: a size in bytes, > 0."""
    cleaned = text.strip().lower().replace(" ", "")
    number = cleaned.rstrip("kmgtib")
    unit = cleaned[len(number) :]
    if unit not in _BYTE_UNITS:
        raise ValueError("expected a size such as 2GiB, 512MiB or 1000000")
    try:
        value = float(number)
    except ValueError:
        raise ValueError("expected a size such as 2GiB, 512MiB or 1000000") from None
    size = int(value * _BYTE_UNITS[unit])
    if not 0 < size < 2**63:
        raise ValueError("must be greater than zero")
    return size


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a finite number greater than zero")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected a TCP port number") from None
    if not 0 <= value <= 65535:
        raise ValueError("must be between 0 and 65535 (0: pick a free port)")
    return value


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def choice(*allowed: str) -> Parser:
    """One of ``allowed``, matched without regard to case, returned as spelled there."""
    by_lower = {a.lower(): a for a in allowed}

    def parse(text: str) -> str:
        found = by_lower.get(text.strip().lower())
        if found is None:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return found

    parse.choices = allowed  # type: ignore[attr-defined]  # read by add_arguments for the usage line
    return parse


def nats_urls(text: str) -> tuple[str, ...]:
    """One or more comma-separated ``nats://``/``tls://`` URLs."""
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise ValueError("expected at least one nats:// URL")
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme not in ("nats", "tls", "ws", "wss") or not parsed.hostname:
            raise ValueError(f"{url!r} is not a nats://host:port URL")
        try:
            parsed.port  # noqa: B018 - property access validates the port
        except ValueError:
            raise ValueError(f"{url!r} has a bad port") from None
    return urls


def existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise ValueError("no such file")
    return path


def path(text: str) -> Path:
    if not text.strip():
        raise ValueError("must not be empty")
    return Path(text).expanduser()


def non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class CommonSettings:
    """Options every service has (docs/ARCHITECTURE.md#options)."""

    nats_url: tuple[str, ...] = option(
        ("nats://127.0.0.1:4222",),
        "--nats-url",
        env="GPUSCALE_NATS_URL",
        parse=nats_urls,
        help="NATS server URL(s), comma-separated",
        metavar="URL",
    )
    log_level: str = option(
        "info", "--log-level", env="GPUSCALE_LOG_LEVEL", parse=choice(*LOG_LEVELS), help="log level"
    )
    nats_creds: Path | None = option(
        None,
        "--nats-creds",
        env="GPUSCALE_NATS_CREDS",
        parse=existing_file,
        help="NATS credentials file (JWT + nkey seed)",
        metavar="FILE",
    )
    nats_tls_ca: Path | None = option(
        None,
        "--nats-tls-ca",
        env="GPUSCALE_NATS_TLS_CA",
        parse=existing_file,
        help="CA bundle to verify the NATS server's TLS certificate",
        metavar="FILE",
    )


def default_identity() -> str:
    """A Lease holder's name when --identity is not given: host name and pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


def http_port_option(default: int, serves: str = "/metrics") -> int:
    """``--http-port``: every service's probes and metrics."""
    return option(
        default,
        "--http-port",
        env="GPUSCALE_HTTP_PORT",
        parse=port,
        help=f"HTTP port for {serves}, /healthz, /readyz",
    )


def kubeconfig_option(help_text: str = "kubeconfig; in-cluster config inside a pod") -> Path | None:
    """``--kubeconfig``: the API server of a service or command outside its cluster."""
    return option(None, "--kubeconfig", env="KUBECONFIG", parse=path, help=help_text)


def lease_name_option(default: str) -> str:
    """``--lease-name``: each service elects its leader on its own Lease."""
    return option(
        default,
        "--lease-name",
        env="GPUSCALE_LEASE_NAME",
        parse=non_empty,
        help="coordination.k8s.io Lease that elects the one active replica",
    )


@dataclass(frozen=True)
class LeaseSettings:
    """Lease leader election (client-go's timings), for services run with several replicas.

    A service subclass also declares ``lease_name`` with :func:`lease_name_option`.
    """

    lease_namespace: str = option(
        "default",
        "--lease-namespace",
        env=("GPUSCALE_LEASE_NAMESPACE", "POD_NAMESPACE"),
        parse=non_empty,
        help="namespace of the Lease",
    )
    identity: str = option(
        "",
        "--identity",
        env="GPUSCALE_IDENTITY",
        parse=non_empty,
        help="this replica's name in the Lease (empty: host name and pid)",
    )
    lease_duration: float = option(
        15.0,
        "--lease-duration",
        env="GPUSCALE_LEASE_DURATION",
        parse=seconds,
        help="how long a leader's lease lasts without renewal (seconds)",
    )
    renew_deadline: float = option(
        10.0,
        "--renew-deadline",
        env="GPUSCALE_RENEW_DEADLINE",
        parse=seconds,
        help="a leader that cannot renew for this long steps down (seconds)",
    )
    retry_period: float = option(
        2.0,
        "--retry-period",
        env="GPUSCALE_RETRY_PERIOD",
        parse=seconds,
        help="how often candidates try and leaders renew (seconds)",
    )

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError(
                "need --lease-duration > --renew-deadline > 1.2 x --retry-period "
                f"(got {self.lease_duration}, {self.renew_deadline}, {self.retry_period})"
            )

    @property
    def holder_identity(self) -> str:
        return self.identity or default_identity()
