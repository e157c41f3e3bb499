"""A parser for the part of PromQL that GPU autoscaling queries use. Pure.

Anything else raises :class:`PromQLError`: the caller says so rather than guess."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


class PromQLError(ValueError):
    """A query outside the supported subset (or not PromQL at all)."""


AGGREGATIONS: Final = frozenset(
    {"avg", "sum", "max", "min", "count", "stddev", "stdvar", "group", "quantile", "topk", "bottomk"}
)
_DURATION_UNITS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str


@dataclass(frozen=True, slots=True)
class Number:
    value: float


@dataclass(frozen=True, slots=True)
class Selector:
    metric: str  # "" when only matchers were given ({__name__="..."} is folded in)
    matchers: tuple[Matcher, ...]


@dataclass(frozen=True, slots=True)
class RangeSelector:
    selector: Selector
    seconds: float


@dataclass(frozen=True, slots=True)
class Call:
    func: str
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Aggregation:
    op: str
    expr: Node
    grouping: tuple[str, ...] | None  # labels of by/without; None: neither
    without: bool = False
    param: Node | None = None  # quantile/topk's first argument


@dataclass(frozen=True, slots=True)
class Binary:
    op: str  # + - * /
    lhs: Node
    rhs: Node


Node = Number | Selector | RangeSelector | Call | Aggregation | Binary

_TOKEN = re.compile(
    r"""
    \s*(?:
      (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![A-Za-z_0-9])
    | (?P<duration>\[\s*(?:\d+(?:ms|s|m|h|d|w|y))+\s*\])
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>\[\]@])
    )""",
    re.VERBOSE,
)
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    text: str


def _tokens(query: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    text = query.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise PromQLError(f"unexpected character {text[pos:].lstrip()[:1]!r} at offset {pos}")
        kind = m.lastgroup
        if kind is None:  # only whitespace left
            break
        out.append(_Tok(kind, m.group(kind)))
        pos = m.end()
    return out


def _duration_seconds(token: str) -> float:
    body = token.strip()[1:-1].strip()
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(body))


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


class _Parser:
    def __init__(self, query: str) -> None:
        self.toks = _tokens(query)
        self.i = 0

    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise PromQLError("the query ends too early")
        self.i += 1
        return tok

    def expect(self, text: str) -> None:
        tok = self.take()
        if tok.text != text:
            raise PromQLError(f"expected {text!r}, found {tok.text!r}")

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "op" and tok.text == text

    def parse(self) -> Node:
        node = self.additive()
        tok = self.peek()
        if tok is not None:
            raise PromQLError(f"unsupported {tok.text!r} (only + - * / and aggregations are understood)")
        return node

    def additive(self) -> Node:
        node = self.multiplicative()
        while self.at("+") or self.at("-"):
            op = self.take().text
            node = Binary(op, node, self.multiplicative())
        return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while self.at("*") or self.at("/"):
            op = self.take().text
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.at("-") or self.at("+"):
            sign = self.take().text
            inner = self.unary()
            if isinstance(inner, Number):
                return Number(-inner.value if sign == "-" else inner.value)
            return Binary("*", Number(-1.0 if sign == "-" else 1.0), inner)
        return self.primary()

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "number":
            return Number(float(tok.text))
        if tok.kind == "op" and tok.text == "(":
            node = self.additive()
            self.expect(")")
            return node
        if tok.kind == "op" and tok.text == "{":
            return self.selector("")
        if tok.kind == "ident":
            if tok.text in AGGREGATIONS and (self.at("(") or self._grouping_next()):
                return self.aggregation(tok.text)
            if self.at("("):
                return self.call(tok.text)
            if self.at("{"):
                self.take()
                return self.selector(tok.text)
            return Selector(tok.text, ())
        raise PromQLError(f"unexpected {tok.text!r}")

    def _grouping_next(self) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "ident" and tok.text in ("by", "without")

    def grouping(self) -> tuple[tuple[str, ...], bool]:
        without = self.take().text == "without"
        self.expect("(")
        labels: list[str] = []
        while not self.at(")"):
            tok = self.take()
            if tok.kind != "ident":
                raise PromQLError(f"expected a label name, found {tok.text!r}")
            labels.append(tok.text)
            if self.at(","):
                self.take()
        self.expect(")")
        return tuple(labels), without

    def aggregation(self, op: str) -> Node:
        grouping: tuple[str, ...] | None = None
        without = False
        if self._grouping_next():
            grouping, without = self.grouping()
        self.expect("(")
        param: Node | None = None
        expr = self.additive()
        if self.at(","):
            self.take()
            param, expr = expr, self.additive()
        self.expect(")")
        if grouping is None and self._grouping_next():
            grouping, without = self.grouping()
        return Aggregation(op, expr, grouping, without, param)

    def call(self, func: str) -> Node:
        self.expect("(")
        args: list[Node] = []
        while not self.at(")"):
            arg = self.additive()
            nxt = self.peek()
            if nxt is not None and nxt.kind == "duration":
                if not isinstance(arg, Selector):
                    raise PromQLError(
                        "a range [..] must follow a plain selector (subqueries are not understood)"
                    )
                arg = RangeSelector(arg, _duration_seconds(self.take().text))
            args.append(arg)
            if self.at(","):
                self.take()
            elif not self.at(")"):
                raise PromQLError(f"expected ',' or ')' in {func}(...)")
        self.expect(")")
        return Call(func, tuple(args))

    def selector(self, metric: str) -> Selector:
        matchers: list[Matcher] = []
        while not self.at("}"):
            label = self.take()
            if label.kind != "ident":
                raise PromQLError(f"expected a label name, found {label.text!r}")
            op = self.take()
            if op.text not in ("=", "!=", "=~", "!~"):
                raise PromQLError(f"expected a label matcher operator, found {op.text!r}")
            value = self.take()
            if value.kind != "string":
                raise PromQLError(f"expected a quoted label value, found {value.text!r}")
            if label.text == "__name__" and op.text == "=":
                metric = _unquote(value.text)
            else:
                matchers.append(Matcher(label.text, op.text, _unquote(value.text)))
            if self.at(","):
                self.take()
            elif not self.at("}"):
                raise PromQLError("expected ',' or '}' in a selector")
        self.expect("}")
        return Selector(metric, tuple(matchers))


def parse(query: str) -> Node:
    """The query's syntax tree, or PromQLError naming what is not understood."""
    if not query or not query.strip():
        raise PromQLError("the query is empty")
    return _Parser(query).parse()


def selectors(node: Node) -> list[Selector]:
    """Every selector in the tree, left to right."""
    if isinstance(node, Selector):
        return [node]
    if isinstance(node, RangeSelector):
        return [node.selector]
    if isinstance(node, Call):
        return [s for a in node.args for s in selectors(a)]
    if isinstance(node, Aggregation):
        return selectors(node.expr)
    if isinstance(node, Binary):
        return selectors(node.lhs) + selectors(node.rhs)
    return []
