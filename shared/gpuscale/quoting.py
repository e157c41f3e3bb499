"""Text someone else wrote, as a problem or a log line quotes it. Purely computational."""

from __future__ import annotations


def quoted(text: object, most: int) -> str:
    """Its repr, cut to ``most`` characters and saying how many more: a quote is never longer
    than a line, whatever a tenant or a caller sent (an annotation may hold 256 KiB)."""
    raw = str(text)
    return repr(raw[:most]) + (f" (+{len(raw) - most} more)" if len(raw) > most else "")
