"""``gpuscale``: one program, a sub-command per part.

Each sub-command's modules are imported only when it runs, so ``--help`` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from gpuscale import settings as settings_mod


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    settings: str  # "module:Class"
    entry: str  # "module:function", a blocking function(settings) -> exit code


COMMANDS: tuple[Command, ...] = (
    Command(
        "collector",
        "node agent: sample GPUs (NVML or simulated), attribute them to pods, publish batches",
        "gpuscale_collector.settings:CollectorSettings",
        "gpuscale_collector.app:main",
    ),
    Command(
        "aggregator",
        "windowed per-workload GPU averages from the node batches",
        "gpuscale_aggregator.settings:AggregatorSettings",
        "gpuscale_aggregator.app:main",
    ),
    Command(
        "decider",
        "apply GPUScaler policies to the metrics, publish explained decisions",
        "gpuscale_decider.settings:DeciderSettings",
        "gpuscale_decider.app:main",
    ),
    Command(
        "actuator",
        "apply decisions to the scale subresource, safely and once",
        "gpuscale_actuator.settings:ActuatorSettings",
        "gpuscale_actuator.app:main",
    ),
    Command(
        "keda-scaler",
        "serve gpuscale's per-workload GPU metrics to KEDA (external scaler) and HPA (external metrics API)",
        "gpuscale_kedascaler.settings:KedaScalerSettings",
        "gpuscale_kedascaler.app:main",
    ),
    Command(
        "nats-auth",
        "NATS auth callout: each collector may publish only its own node's samples",
        "gpuscale_natsauth.settings:NatsAuthSettings",
        "gpuscale_natsauth.app:main",
    ),
    Command(
        "kube-sim",
        "a Kubernetes API simulator that also plays a GPU cluster",
        "gpuscale_kubesim.settings:KubeSimSettings",
        "gpuscale_kubesim.app:main",
    ),
    Command(
        "demo",
        "run the whole pipeline locally against kube-sim and watch it scale",
        "gpuscale_cli.demo.settings:DemoSettings",
        "gpuscale_cli.demo.run:main",
    ),
    Command(
        "convert",
        "turn HPA and KEDA ScaledObject YAML into GPUScaler YAML, saying what does not carry over",
        "gpuscale_cli.convert.app:ConvertSettings",
        "gpuscale_cli.convert.app:main",
    ),
    Command(
        "shadow-report",
        "compare shadow mode's advice with what the live controller (HPA, KEDA) did: lead, lag, GPU-seconds",
        "gpuscale_cli.shadow.app:ShadowReportSettings",
        "gpuscale_cli.shadow.app:main",
    ),
    Command(
        "setup",
        "create or update gpuscale's JetStream streams and KV buckets (the one identity that may)",
        "gpuscale_cli.setup:SetupSettings",
        "gpuscale_cli.setup:main",
    ),
    Command(
        "doctor",
        "check an install: NATS, streams, collectors, aggregator, decider, actuator, CRD, credentials",
        "gpuscale_cli.doctor:DoctorSettings",
        "gpuscale_cli.doctor:main",
    ),
    Command(
        "status",
        "one line per scaled workload, like `kubectl get hpa`",
        "gpuscale_cli.status:StatusSettings",
        "gpuscale_cli.status:main",
    ),
)


def _load(ref: str) -> object:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _settings_class(command: Command) -> type:
    cls = _load(command.settings)
    if not isinstance(cls, type):
        raise TypeError(f"{command.settings} is not a settings class")
    return cls


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``selected``'s options are loaded (each costs an import)."""
    parser = argparse.ArgumentParser(
        prog="gpuscale",
        description="GPU-metric autoscaling for Kubernetes inference workloads.",
        epilog="Every option is also an environment variable (shown in each sub-command's --help).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if command.name == selected:
            settings_mod.add_arguments(p, _settings_class(command))
            parser.set_defaults(_subparser=p)
    return parser


def _debug_asked(argv: Sequence[str]) -> bool:
    """``--log-level debug`` on the line: a failure shows its traceback too."""
    for i, a in enumerate(argv):
        if a == "--log-level=debug" or (a == "--log-level" and argv[i + 1 : i + 2] == ["debug"]):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = {c.name for c in COMMANDS}
    selected = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(selected if selected in names else None)
    except (ImportError, AttributeError, TypeError) as e:  # a broken install, named in one line
        print(f"gpuscale {selected}: cannot load this part: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if extra:  # the sub-command's own usage, not the top level's
        sub_parser: argparse.ArgumentParser = getattr(args, "_subparser", parser)
        sub_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if hasattr(args, "_subparser"):
        del args._subparser
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        settings: object = settings_mod.build(_settings_class(command), args)
    except settings_mod.SettingsError as e:
        for line in e.lines():
            print(f"gpuscale {command.name}: {line}", file=sys.stderr)
        return 2
    entry = _load(command.entry)
    if not callable(entry):
        raise TypeError(f"{command.entry} is not callable")
    try:
        code = entry(settings)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if _debug_asked(argv):
            raise
        print(f"gpuscale {command.name}: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        print(
            f"gpuscale {command.name}: run it again with --log-level debug for the details", file=sys.stderr
        )
        return 1
    return int(code) if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
