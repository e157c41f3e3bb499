"""Text read from the cluster (a tenant may have written it), as the operator's terminal shows it."""


def shown(text: str) -> str:
    """Each non-printable character (ESC, CR, BEL, C1, bidi overrides) as its Python escape: a terminal acts on them raw."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
