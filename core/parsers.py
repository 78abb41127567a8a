"""A strict JSON parser for the API: bounded, and refusing what would otherwise become a 500.

DRF's JSONParser reads the whole stream, lets a RecursionError (deep nesting) escape, and
accepts lone surrogates (``"\\ud800"``), which cannot be encoded back to UTF-8 when a message
echoes them. This one reads at most MAX_BODY_BYTES + 1 bytes, accepts only UTF-8, refuses
NaN/Infinity and numbers that overflow to them, nesting deeper than MAX_DEPTH, lone
surrogates in keys and values, and a top level that is not an object (every JSON body of
this API is an object; a list or ``null`` is never taken as ``{}``). Duplicate keys are
allowed (the last one wins), as in DRF.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, parsers

from core.middleware import MAX_BODY_BYTES, Readable, read_capped

MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


class TooLarge(exceptions.APIException):
    status_code = 413
    default_code = "too_large"
    default_detail = f"The request body is larger than {MAX_BODY_BYTES} bytes (1 MiB)."


class NotAnObject(exceptions.APIException):
    status_code = 400
    default_code = "invalid_input"
    default_detail = "The body must be a JSON object."


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def check_json_value(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """ValueError when ``value`` nests deeper than ``max_depth`` or holds a lone surrogate (key or value).

    Iterative, so a deep value cannot exhaust the stack here either.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text")
            continue
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise ValueError(f"nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                stack.extend((key, depth + 1) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def scrub_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) written as ``\\udXXX`` text.

    For error bodies, which may echo input: the renderer cannot encode a lone surrogate.
    """
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {scrub_surrogates(key): scrub_surrogates(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_surrogates(item) for item in value]
    return value


def loads_strict(raw: bytes) -> Any:
    """The JSON value of ``raw`` (UTF-8), or ValueError with a sentence saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("the body is not UTF-8") from exc
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from exc
    check_json_value(value)
    return value


class StrictJSONParser(parsers.BaseParser):
    media_type = "application/json"

    def parse(
        self, stream: Readable, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        raw = read_capped(stream, MAX_BODY_BYTES)  # the middleware refuses first; this bounds any other path
        if len(raw) > MAX_BODY_BYTES:
            raise TooLarge()
        try:
            value = loads_strict(raw)
        except ValueError as exc:  # JSONDecodeError, too many digits, the checks above
            raise exceptions.ParseError(f"The body is not valid JSON: {exc}.") from exc
        if not isinstance(value, dict):
            raise NotAnObject()
        return value
