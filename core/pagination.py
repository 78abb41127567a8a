"""Keyset ("cursor") pagination for every list of the API (docs/api.md#lists).

``?limit=`` (default 100, at most 1000) and an opaque ``?cursor=`` answer
``{"results": [...], "next": "<absolute URL>" | null}``. The ``next`` link is
the request's own URL (so its filters and ``limit``) with the cursor of the
page's last row.

Why our own class rather than DRF's ``CursorPagination``: DRF keys its cursor
on the first ordering field only (plus an offset among equal values), answers
a bad cursor with 404 and a bad page size with the default, and its cursor is
plain base64 that a client can edit. Here:

- the order is the queryset's own (its ``order_by``, else the model's
  ``Meta.ordering``), made total by appending the primary key (in the
  direction of the last field) unless a unique field already ends it; a page
  is the rows strictly after the last row of the previous page in that order,
  so rows inserted between two requests are neither repeated nor skipped;
- the cursor is the last row's ordering values, signed (``django.core.signing``,
  the project's SECRET_KEY) and salted with the URL path: an edited, truncated
  or foreign (another list's) cursor is a 400 ``invalid_input`` with
  ``"field": "cursor"``, never a different page;
- one query per page (``LIMIT limit + 1`` tells whether there is a next page):
  no COUNT, no OFFSET.

A query parameter the list does not declare (``core.query.query_parameters``), other than ``limit``
and ``cursor``, is a 400 ``unknown_parameter`` before anything is read.

Ordering fields must be concrete, non-null columns of the model itself.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.core import signing
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured, ValidationError
from django.db.models import Field, Model, Q, QuerySet
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from core.errors import InvalidInput
from core.query import refuse_unknown_parameters

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

#: One ordering field of a list and whether it is descending.
OrderField = tuple["Field[Any, Any]", bool]


def _encode(value: Any) -> Any:
    """A JSON value that ``Field.to_python`` turns back into ``value`` exactly (microseconds kept)."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    return value


class CursorPagination(BasePagination):
    """Keyset pagination on the queryset's ordering made total; see the module docstring."""

    limit_query_param = "limit"
    cursor_query_param = "cursor"
    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def __init__(self) -> None:
        self.next_url: str | None = None

    # --- the request ---------------------------------------------------------------------
    def get_limit(self, request: Request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return self.default_limit
        # int() would also take " 5", "+5" and "5_0": only plain digits are a limit.
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= self.max_limit:
            raise InvalidInput(
                f"{self.limit_query_param} must be an integer from 1 to {self.max_limit}.",
                code="invalid_input",
                field=self.limit_query_param,
            )
        return int(raw)

    def _bad_cursor(self) -> InvalidInput:
        return InvalidInput(
            f"{self.cursor_query_param} is not a cursor this list gave out (use the `next` link as is).",
            code="invalid_input",
            field=self.cursor_query_param,
        )

    @staticmethod
    def _salt(request: Request) -> str:
        # Bound to the list it came from: a rollout's nodes cursor is refused on another rollout.
        return f"core.pagination:{request.path}"

    def decode_cursor(self, request: Request, fields: Sequence[OrderField]) -> list[Any] | None:
        """The ordering values after which the page starts, or None for the first page."""
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return None
        try:
            payload = signing.loads(raw, salt=self._salt(request))
        except signing.BadSignature as exc:
            raise self._bad_cursor() from exc
        names = [field.attname for field, _ in fields]
        if not isinstance(payload, dict) or payload.get("o") != names:
            raise self._bad_cursor()  # signed by us, but for another ordering (the code changed)
        values = payload.get("v")
        if not isinstance(values, list) or len(values) != len(fields):
            raise self._bad_cursor()
        try:
            return [field.to_python(value) for (field, _), value in zip(fields, values, strict=True)]
        except (ValidationError, TypeError, ValueError) as exc:
            raise self._bad_cursor() from exc

    def encode_cursor(self, request: Request, fields: Sequence[OrderField], row: Model) -> str:
        payload = {
            "o": [field.attname for field, _ in fields],
            "v": [_encode(getattr(row, field.attname)) for field, _ in fields],
        }
        return signing.dumps(payload, salt=self._salt(request), compress=True)

    # --- the order -----------------------------------------------------------------------
    @staticmethod
    def ordering(queryset: QuerySet[Any]) -> list[OrderField]:
        """(field, descending) pairs of the queryset's order, ending with a unique field."""
        model = queryset.model
        names = list(queryset.query.order_by or model._meta.ordering)
        fields: list[OrderField] = []
        for name in names:
            if not isinstance(name, str) or "__" in name or name in {"?", "-?"}:
                raise ImproperlyConfigured(f"Cannot paginate {model.__name__} on {name!r}: use a model field.")
            descending = name.startswith("-")
            name = name.lstrip("-+")
            try:
                field = model._meta.pk if name == "pk" else model._meta.get_field(name)
            except FieldDoesNotExist as exc:
                raise ImproperlyConfigured(f"{model.__name__} has no field {name!r} to paginate on.") from exc
            if not field.concrete or field.null:
                raise ImproperlyConfigured(f"Cannot paginate {model.__name__} on {name!r}: not a non-null column.")
            fields.append((field, descending))
            if field.primary_key or field.unique:
                return fields  # already total: later fields never decide
        fields.append((model._meta.pk, fields[-1][1] if fields else False))
        return fields

    @staticmethod
    def after(fields: Sequence[OrderField], values: Sequence[Any]) -> Q:
        """Rows strictly after ``values`` in the order: (a > x) or (a = x and b > y) or ...

        The first field's ``>=`` (or ``<=``) is redundant but lets PostgreSQL use
        an index on it as a range instead of scanning the OR.
        """
        first, first_descending = fields[0]
        condition = Q()
        equal: dict[str, Any] = {}
        for (field, descending), value in zip(fields, values, strict=True):
            condition |= Q(**equal, **{f"{field.attname}__{'lt' if descending else 'gt'}": value})
            equal[field.attname] = value
        bound = Q(**{f"{first.attname}__{'lte' if first_descending else 'gte'}": values[0]})
        return bound & condition

    # --- DRF's pagination interface --------------------------------------------------------
    # Only a queryset can be keyset-paginated (DRF's signature also allows a plain sequence).
    def paginate_queryset(self, queryset: QuerySet[Any], request: Request, view: Any = None) -> list[Any]:  # type: ignore[override]
        # Every list refuses what it does not declare (core/query.py): a typo never lists the whole fleet.
        refuse_unknown_parameters(request, view, also=(self.limit_query_param, self.cursor_query_param))
        limit = self.get_limit(request)
        fields = self.ordering(queryset)
        start = self.decode_cursor(request, fields)
        if start is not None:
            queryset = queryset.filter(self.after(fields, start))
        order = [f"-{field.attname}" if descending else field.attname for field, descending in fields]
        rows = list(queryset.order_by(*order)[: limit + 1])
        page, more = rows[:limit], len(rows) > limit
        self.next_url = None
        if more:
            cursor = self.encode_cursor(request, fields, page[-1])
            self.next_url = replace_query_param(request.build_absolute_uri(), self.cursor_query_param, cursor)
        return page

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"results": data, "next": self.next_url})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {
                "results": schema,
                "next": {
                    "type": "string",
                    "format": "uri",
                    "nullable": True,
                    "description": "The next page (this URL with its filters and limit, and a new cursor); "
                    "null on the last page.",
                },
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": f"Rows per page, 1 to {self.max_limit} (default {self.default_limit}).",
                "schema": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_limit,
                    "default": self.default_limit,
                },
            },
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Opaque: copied from the previous page's `next` link.",
                "schema": {"type": "string"},
            },
        ]


def paginated_response(
    request: Request, queryset: QuerySet[Any], represent: Callable[[list[Any]], Any], *, view: Any = None
) -> Response:
    """One page of ``queryset`` as ``{"results": represent(page), "next": ...}``, for views that are no GenericAPIView.

    ``represent`` sees only the page's rows, so what it queries for them is per page, not per list.
    """
    paginator_class = getattr(view, "pagination_class", None) or CursorPagination
    paginator = paginator_class()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(represent(page))


class PaginatedViewMixin:
    """For a plain ``ViewSet``: declares the paginator (drf-spectacular reads ``pagination_class``)."""

    pagination_class: type[BasePagination] | None = CursorPagination

    def paginated_response(self, queryset: QuerySet[Any], represent: Callable[[list[Any]], Any]) -> Response:
        return paginated_response(self.request, queryset, represent, view=self)  # type: ignore[attr-defined]
