"""The query parameters an endpoint accepts, declared once for the OpenAPI description and the refusal
(docs/api.md#lists).

A handler declares its own parameters with ``@query_parameters(OpenApiParameter(...), ...)``: the
decorator hands them to drf-spectacular (``extend_schema(parameters=...)``) and records their names
on the handler. ``refuse_unknown_parameters`` answers 400 ``unknown_parameter`` for any other name in
the query string. Every list calls it through the project's paginator (core/pagination.py, which adds
``limit`` and ``cursor``), so a new list refuses what it does not declare without a line of its own:
a typo such as ``?selecter=`` never lists, nor selects, the whole fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request

from core.errors import InvalidInput

#: The attribute a handler's declared query parameter names are kept in.
DECLARED = "query_parameter_names"

Handler = TypeVar("Handler", bound=Callable[..., Any])


def query_parameters(*parameters: OpenApiParameter) -> Callable[[Handler], Handler]:
    """Declare the query parameters a handler reads (besides a list's ``limit`` and ``cursor``)."""

    def decorate(handler: Handler) -> Handler:
        setattr(handler, DECLARED, frozenset(parameter.name for parameter in parameters))
        return extend_schema(parameters=list(parameters))(handler)

    return decorate


def declared_parameters(request: Request, view: Any) -> frozenset[str]:
    """The names the handler answering ``request`` declared (none when it declared none).

    A ViewSet binds each action to its method's name (``view.get`` is ``view.list`` for a list), so
    the handler is found the same way for a ViewSet and an APIView.
    """
    handler = getattr(view, request.method.lower(), None) if view is not None and request.method else None
    return getattr(handler, DECLARED, frozenset())


def refuse_unknown_parameters(request: Request, view: Any, *, also: Iterable[str] = ()) -> None:
    """400 ``unknown_parameter`` naming the first query parameter that neither the handler nor ``also`` knows."""
    known = declared_parameters(request, view) | frozenset(also)
    unknown = [name for name in request.query_params if name not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "none"
        raise InvalidInput(
            f"Unknown query parameter {unknown[0]!r}: this endpoint takes {listed}.",
            code="unknown_parameter",
            field=unknown[0],
        )
