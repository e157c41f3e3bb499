"""A quote of someone else's text is one short line, however long the text."""

from __future__ import annotations

from gpuscale.quoting import quoted


def test_a_short_text_is_quoted_whole_as_its_repr() -> None:
    assert quoted("/metrics", 100) == "'/metrics'"


def test_a_long_text_is_cut_and_says_how_much_more_there_was() -> None:
    assert quoted("x" * 250, 100) == repr("x" * 100) + " (+150 more)"


def test_control_characters_are_escaped_by_the_repr() -> None:
    assert quoted("a\nb\x1b[2J", 100) == "'a\\nb\\x1b[2J'"
