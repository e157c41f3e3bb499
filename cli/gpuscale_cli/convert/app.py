"""``gpuscale convert FILE|-``: the shell around :mod:`.translate`.

Exit 0: all converted; 1: at least one not (or none at all); 2: the input cannot be read."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from gpuscale.policy import PolicyError, parse_gpuscaler
from gpuscale.settings import choice, option

from .render import render, stderr_lines
from .translate import convert_documents

PROG = "gpuscale convert"


@dataclass(frozen=True)
class ConvertSettings:
    file: str = option(
        "-",
        "file",
        metavar="FILE|-",
        help="HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v2beta1) and KEDA ScaledObject YAML, "
        "several documents allowed; - reads standard input",
    )
    mode: str = option(
        "Active",
        "--mode",
        parse=choice("Active", "Shadow"),
        help="spec.mode of every GPUScaler printed: Shadow to compare with the autoscaler "
        "you have before cutting over (gpuscale shadow-report)",
    )


class InputError(Exception):
    """The input cannot be read; the message is one line."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def read_documents(name: str, stdin: TextIO) -> list[Any]:
    """The YAML documents of ``name`` (``-``: standard input), or InputError in one line."""
    label = "standard input" if name == "-" else name
    try:
        if name == "-":
            text = stdin.read()
        else:
            with open(name, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"cannot read {label}: {_one_line(reason)}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{label} is not valid YAML{where}: {_one_line(str(problem))}") from None
    if not docs:
        raise InputError(f"{label} holds no YAML document")
    return docs


def run(name: str, stdin: TextIO, stdout: TextIO, stderr: TextIO, mode: str = "Active") -> int:
    try:
        docs = read_documents(name, stdin)
    except InputError as e:
        print(f"{PROG}: {e}", file=stderr)
        return 2
    conversions = convert_documents(docs)
    code = 0
    if mode != "Active":
        for conv in conversions:
            if conv.gpuscaler is not None:
                conv.gpuscaler["spec"]["mode"] = mode
                conv.mapped.append(
                    f"spec.mode: {mode} (evaluated beside the autoscaler above, never actuated)"
                )
    for conv in conversions:
        if conv.gpuscaler is None:
            continue
        try:
            parse_gpuscaler(conv.gpuscaler)  # the decider's own parser: what we print, it accepts
        except PolicyError as e:  # a bug in convert: say so rather than print a policy that fails later
            conv.error = f"internal error, the result does not parse as a GPUScaler: {e}"
            conv.gpuscaler = None
    stdout.write(render(conversions))
    for line in stderr_lines(conversions):
        print(f"{PROG}: {line}", file=stderr)
    autoscalers = [c for c in conversions if c.autoscaler]
    if not autoscalers:
        print(f"{PROG}: no HorizontalPodAutoscaler or ScaledObject in the input", file=stderr)
        code = 1
    elif any(not c.converted for c in autoscalers):
        code = 1
    return code


def main(settings: ConvertSettings) -> int:
    return run(settings.file, sys.stdin, sys.stdout, sys.stderr, settings.mode)
