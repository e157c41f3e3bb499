"""Kubernetes names as the API server validates them. Pure.

A name that reaches a URL path must not read as another path, a query or a fragment."""

from __future__ import annotations

import re
from typing import Final

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL: Final = re.compile(_LABEL)
_DNS1123_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_KIND: Final = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_VERSION: Final = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")


def is_dns1123_label(value: str) -> bool:
    """Namespaces (and StatefulSet names): at most 63 of ``[a-z0-9-]``."""
    return len(value) <= DNS1123_LABEL_MAX and _DNS1123_LABEL.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """Most object names: at most 253 characters, dot-separated DNS labels."""
    return len(value) <= DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def target_problems(namespace: str, api_version: str, kind: str, name: str) -> list[str]:
    """Why a scale target's coordinates are not a Kubernetes object's ([] if they are)."""
    problems = []
    if not is_dns1123_label(namespace):
        problems.append(f"namespace {namespace[:80]!r} is not a DNS-1123 label")
    if not is_dns1123_subdomain(name):
        problems.append(f"name {name[:80]!r} is not a DNS-1123 subdomain")
    if not _KIND.fullmatch(kind):
        problems.append(f"kind {kind[:80]!r} is not a Kubernetes kind")
    group, _, version = api_version.rpartition("/")
    if (group and not is_dns1123_subdomain(group)) or not _VERSION.fullmatch(version):
        problems.append(f"apiVersion {api_version[:80]!r} is not group/version")
    return problems
