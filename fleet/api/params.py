"""Reading ids and flags from a request's path and query string, and its body through a serializer: a JSON 400
or 404 for a malformed one."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer

from core.errors import InvalidInput, NotFound


def path_id(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as exc:
        raise NotFound(f"No {what} {value!r}.", code="not_found") from exc


def query_id(request: Request, name: str) -> UUID | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        return UUID(value)
    except ValueError as exc:
        raise InvalidInput(f"{name} must be a UUID.", code="invalid_input") from exc


def query_text(request: Request, name: str) -> str | None:
    """A query parameter compared with a text column as it is: PostgreSQL stores and compares no NUL, so one
    holding a NUL is a 400 naming it, not a 500."""
    value = request.query_params.get(name)
    if value is not None and "\x00" in value:
        raise InvalidInput(f"{name} holds a NUL character.", code="invalid_input", field=name)
    return value


def query_bool(request: Request, name: str) -> bool | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if value not in ("true", "false"):
        raise InvalidInput(f"{name} must be true or false.", code="invalid_input", field=name)
    return value == "true"


def valid_body(serializer_class: type[BaseSerializer], request: Request) -> dict[str, Any]:
    """The body's data as ``serializer_class`` validates it (its 400 otherwise)."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
