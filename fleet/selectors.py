"""Label selectors: one grammar, one parser (Kubernetes' label-selector string syntax), no Django.

    selector    := "" | requirement ("," requirement)*
    requirement := "!" key                      (absent)
                 | key                          (present)
                 | key ("=" | "==" | "!=") value?
                 | key ("in" | "notin") "(" value? ("," value?)* ")"

Whitespace (space, tab, CR, LF) around tokens is ignored; an empty value is the empty string, as in
Kubernetes (``k=`` matches ``k`` set to ""; ``k in ()`` is ``k in ("")``). An identifier is any run of
characters that is neither whitespace nor one of ``! = , ( ) < >``, then checked as a label key or value
(fleet/labels.py), so a Unicode lookalike or a SQL fragment is refused where it stands. The parser's
result is data (``Selector``); fleet/services/labels.py compiles it to one SQL filter on the indexed jsonb
column: the fleet is never filtered in Python. Errors say where: ``SelectorError.position`` (0-based
character offset) and a detail that names it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from fleet.labels import label_key_problem, label_value_problem

MAX_SELECTOR_BYTES = 4096
_WHITESPACE = " \t\r\n"
_SPECIAL = "!=,()<>"


class Operator(enum.StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {self.operator.value} ({','.join(self.values)})"
        return f"{self.key}{self.operator.value}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    """Requirements that must all hold; none: every node."""

    requirements: tuple[Requirement, ...] = ()

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


class SelectorError(ValueError):
    def __init__(self, position: int, problem: str) -> None:
        super().__init__(f"at character {position}: {problem}")
        self.position = position
        self.problem = problem


@dataclass(frozen=True)
class _Token:
    kind: str  # "ident", "end", or the symbol itself: "!", "=", "==", "!=", ",", "(", ")", "<", ">"
    text: str
    position: int


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
        elif ch in _SPECIAL:
            pair = text[i : i + 2]
            symbol = pair if pair in ("==", "!=") else ch
            tokens.append(_Token(symbol, symbol, i))
            i += len(symbol)
        else:
            start = i
            while i < len(text) and text[i] not in _WHITESPACE and text[i] not in _SPECIAL:
                i += 1
            tokens.append(_Token("ident", text[start:i], start))
    tokens.append(_Token("end", "end of string", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        if token.kind != "end":
            self.at += 1
        return token

    @staticmethod
    def refuse(token: _Token, expected: str) -> SelectorError:
        return SelectorError(token.position, f"found {token.text!r}, expected {expected}")

    def selector(self) -> Selector:
        requirements: list[Requirement] = []
        if self.peek().kind == "end":
            return Selector()
        while True:
            if self.peek().kind not in ("ident", "!"):
                raise self.refuse(self.peek(), "'!' or a label key")
            requirements.append(self.requirement())
            token = self.take()
            if token.kind == "end":
                return Selector(tuple(requirements))
            if token.kind != ",":
                raise self.refuse(token, "',' or the end of the selector")

    def key(self) -> str:
        token = self.take()
        if token.kind != "ident":
            raise self.refuse(token, "a label key")
        problem = label_key_problem(token.text)
        if problem is not None:
            raise SelectorError(token.position, f"{token.text!r} is not a label key: {problem}")
        return token.text

    def value(self) -> str:
        token = self.take()
        problem = label_value_problem(token.text)
        if problem is not None:
            raise SelectorError(token.position, f"{token.text!r} is not a label value: {problem}")
        return token.text

    def requirement(self) -> Requirement:
        if self.peek().kind == "!":
            self.take()
            return Requirement(self.key(), Operator.DOES_NOT_EXIST)
        key = self.key()
        token = self.peek()
        if token.kind in ("end", ","):
            return Requirement(key, Operator.EXISTS)
        self.take()
        if token.kind in ("=", "==", "!="):
            operator = Operator.NOT_EQUALS if token.kind == "!=" else Operator.EQUALS
            if self.peek().kind in ("end", ","):
                return Requirement(key, operator, ("",))
            if self.peek().kind != "ident":
                raise self.refuse(self.peek(), "a label value")
            return Requirement(key, operator, (self.value(),))
        if token.kind == "ident" and token.text in ("in", "notin"):
            operator = Operator.IN if token.text == "in" else Operator.NOT_IN
            return Requirement(key, operator, self.values())
        raise self.refuse(token, "'=', '==', '!=', 'in', 'notin', ',' or the end of the selector")

    def values(self) -> tuple[str, ...]:
        token = self.take()
        if token.kind != "(":
            raise self.refuse(token, "'('")
        values: list[str] = []
        while True:
            token = self.peek()
            if token.kind in (",", ")"):
                values.append("")
            elif token.kind == "ident":
                values.append(self.value())
            else:
                raise self.refuse(token, "a label value, ',' or ')'")
            token = self.take()
            if token.kind == ")":
                return tuple(dict.fromkeys(values))
            if token.kind != ",":
                raise self.refuse(token, "',' or ')'")


def selector_parse(text: str) -> Selector:
    """``text`` parsed, or ``SelectorError`` saying where it is wrong. At most 4 KiB (UTF-8)."""
    if not isinstance(text, str):
        raise SelectorError(0, "a selector is a string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SELECTOR_BYTES:
        raise SelectorError(0, f"the selector is {size} bytes; at most {MAX_SELECTOR_BYTES}")
    return _Parser(text).selector()
