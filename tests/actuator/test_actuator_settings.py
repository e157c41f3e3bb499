"""The actuator's options: flags, environment variables, defaults, checks."""

from __future__ import annotations

import argparse
import os

import pytest

from gpuscale.settings import SettingsError, add_arguments, build
from gpuscale_actuator.settings import ActuatorSettings


def parse(argv: list[str], environ: dict[str, str] | None = None) -> ActuatorSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser, ActuatorSettings)
    return build(ActuatorSettings, parser.parse_args(argv), environ or {})


def test_defaults() -> None:
    s = parse([])
    assert (s.lease_name, s.lease_namespace, s.resync_interval, s.dry_run) == (
        "gpuscale-actuator",
        "default",
        30.0,
        False,
    )
    assert s.http_port == 9403
    assert s.holder_identity.endswith(f"-{os.getpid()}")


@pytest.mark.parametrize(
    ("argv", "environ", "field", "expected"),
    [
        (["--lease-name", "x"], {}, "lease_name", "x"),
        ([], {"GPUSCALE_LEASE_NAME": "y"}, "lease_name", "y"),
        ([], {"POD_NAMESPACE": "gpuscale"}, "lease_namespace", "gpuscale"),
        ([], {"GPUSCALE_LEASE_NAMESPACE": "a", "POD_NAMESPACE": "b"}, "lease_namespace", "a"),
        (["--identity", "pod-0"], {}, "holder_identity", "pod-0"),
        (["--resync-interval", "90s"], {}, "resync_interval", 90.0),
        ([], {"GPUSCALE_RESYNC_INTERVAL": "2m"}, "resync_interval", 120.0),
        (["--dry-run"], {}, "dry_run", True),
        ([], {"GPUSCALE_DRY_RUN": "true"}, "dry_run", True),
    ],
)
def test_flags_and_environment(
    argv: list[str], environ: dict[str, str], field: str, expected: object
) -> None:
    assert getattr(parse(argv, environ), field) == expected


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--resync-interval", "-1"], "--resync-interval"),
        (["--lease-name", " "], "--lease-name"),
        (["--lease-duration", "5", "--renew-deadline", "6"], "--lease-duration"),
    ],
)
def test_bad_values_name_the_option(argv: list[str], flag: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse(argv)
    assert flag in str(info.value)
