"""One error shape for the whole API: {"code": "<snake_case>", "detail": "<sentence>"}."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.database import DATABASE_ERRORS, DATABASE_UNAVAILABLE, RETRY_AFTER_SECONDS, database_unavailable
from core.errors import DomainError
from core.parsers import scrub_surrogates


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for key, value in detail.items():
            message = _first_message(value)
            return message if key == "non_field_errors" else f"{key}: {message}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = _error_response(exc, context)
    if response is not None:
        # An error may echo input; a lone surrogate in it would make the renderer itself fail (a 500).
        response.data = scrub_surrogates(response.data)
    return response


def _error_response(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, DATABASE_ERRORS):
        database_unavailable(exc)  # logs
        return Response(dict(DATABASE_UNAVAILABLE), status=503, headers={"Retry-After": RETRY_AFTER_SECONDS})
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {
            "code": "invalid_input",
            "detail": _first_message(exc.detail),
            "errors": exc.detail,
        }
        return response
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        # An authentication class may name its own code (an expired API key: key_expired).
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        response.data = {"code": code, "detail": str(exc.detail)}
        return response
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        if isinstance(exc, exceptions.PermissionDenied):
            code = "permission_denied"
        elif isinstance(exc, exceptions.ParseError):
            code = "invalid_json"
        response.data = {"code": code, "detail": str(exc.detail)}
    return response
