"""GPUScaler objects from a YAML file (``--policies``), for running without the CRD."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuscale.policy import GPUScaler, PolicyError, object_identity, parse_gpuscaler


@dataclass(frozen=True, slots=True)
class InvalidPolicy:
    namespace: str
    name: str
    error: PolicyError
    raw: Any = None


def parse_documents(docs: list[Any]) -> tuple[list[GPUScaler], list[InvalidPolicy]]:
    valid: list[GPUScaler] = []
    invalid: list[InvalidPolicy] = []
    for i, doc in enumerate(docs):
        if doc is None:  # an empty document between two '---'
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            more_valid, more_invalid = parse_documents(doc["items"])
            valid += more_valid
            invalid += more_invalid
            continue
        try:
            valid.append(parse_gpuscaler(doc))
        except PolicyError as e:
            ns, name = object_identity(doc)
            if name == "<unnamed>":
                name = f"<document {i + 1}>"
            invalid.append(InvalidPolicy(ns, name, e, doc))
    return valid, invalid


class PolicyFileError(ValueError):
    """The file as a whole cannot be read: keep the policies loaded before."""


def load_policy_file(path: Path) -> tuple[list[GPUScaler], list[InvalidPolicy]]:
    """Every document of a (multi-document) YAML file. Bad objects are
    returned as InvalidPolicy; an unreadable file raises PolicyFileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyFileError(f"{path}: cannot read: {e}") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f"line {where.line + 1}" if where is not None else "somewhere"
        raise PolicyFileError(f"{path}: not valid YAML at {line}: {e}") from None
    return parse_documents(docs)


class WatchedPolicyFile:
    """``--policies``: loaded at start and again whenever the file changes.
    An unreadable file (mid-rename, broken YAML) keeps what was loaded before:
    :meth:`reload_if_changed` then returns None and :attr:`failed` says why."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mtime: float | None = None
        self.failed: str | None = None

    def reload_if_changed(self) -> tuple[list[GPUScaler], list[InvalidPolicy]] | None:
        """The policies when the file changed and reads well, else None."""
        try:
            mtime: float | None = self.path.stat().st_mtime
        except OSError:
            mtime = None
        if mtime is not None and mtime == self.mtime:
            return None
        try:
            loaded = load_policy_file(self.path)
        except PolicyFileError as e:
            self.failed = str(e)
            return None
        self.mtime, self.failed = mtime, None
        return loaded
