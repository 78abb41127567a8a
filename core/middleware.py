"""A request body larger than MAX_BODY_BYTES answers 413 ``too_large`` before anything reads it.

Every endpoint under /api/ is covered, the agent's and the releases' (raw envelope) included,
whatever parser the view uses or whether it reads a body at all. DRF's JSONParser reads the
stream whole, so DATA_UPLOAD_MAX_MEMORY_SIZE never applies to it, and gunicorn has no body limit.

- A declared Content-Length is checked up front: nothing is read.
- Without one (``Transfer-Encoding: chunked``), a server that marks its input as terminated
  (PEP 3333's ``wsgi.input_terminated``: gunicorn does) lets us read to EOF: at most
  MAX_BODY_BYTES + 1 bytes are read, and the body is handed on with its length, so Django and
  DRF read it as if it had been declared (without this they would see an empty body). Servers
  without the flag (runserver) cannot tell where a chunked body ends; Django then sees none.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Protocol

from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.database import DATABASE_ERRORS, database_unavailable

MAX_BODY_BYTES = 1 << 20  # 1 MiB: docs/api.md#errors, and the DSSE envelope's own limit
API_PREFIX = "/api/"
_READ_CHUNK = 64 * 1024


def _refusal(status: int, code: str, detail: str) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=status)
    # Answered before CommonMiddleware would add it: a client still sending can tell where the answer ends.
    response["Content-Length"] = str(len(response.content))
    return response


def too_large_response() -> JsonResponse:
    return _refusal(413, "too_large", f"The request body is larger than {MAX_BODY_BYTES} bytes (1 MiB).")


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def read_capped(stream: Readable, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``stream`` (to EOF): one byte more than allowed tells "too large"."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(_READ_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class BodySizeLimitMiddleware:
    """Place it first in MIDDLEWARE so that no other middleware reads the body before it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(API_PREFIX):
            refused = self._refuse(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    def _refuse(self, request: HttpRequest) -> HttpResponse | None:
        declared = request.META.get("CONTENT_LENGTH")
        if declared:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                return _refusal(400, "invalid_input", "Content-Length must be a non-negative integer.")
            return too_large_response() if length > MAX_BODY_BYTES else None
        if not request.META.get("wsgi.input_terminated"):
            return None
        body = read_capped(request.META["wsgi.input"], MAX_BODY_BYTES)
        if len(body) > MAX_BODY_BYTES:
            return too_large_response()
        # Hand the (now bounded) body on as a declared one. WSGIRequest reads through ``_stream``.
        request.META["CONTENT_LENGTH"] = str(len(body))
        request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]
        return None


class DatabaseUnavailableMiddleware:
    """Under /api/, a database that is down answers 503 ``database_unavailable`` from plain Django views too.

    DRF views get it from core/exceptions.py; this covers the others (the binary downloads).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if request.path.startswith(API_PREFIX) and isinstance(exception, DATABASE_ERRORS):
            return database_unavailable(exception)
        return None
