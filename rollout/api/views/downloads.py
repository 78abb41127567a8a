"""``GET|HEAD {downloadsUrl}/bcd/{version}/linux-{arch}``: a binary's bytes (docs/api.md#binary-downloads).

Unauthenticated on purpose: integrity comes from the sha256 in the signed manifest, which agents
check before running anything. Django always decides whether the binary exists (a JSON 404
otherwise, whatever moves the bytes), then, by ``ROLLOUT_DOWNLOADS_OFFLOAD``:

- ``redirect``: 302 to a presigned URL of the object (its store answers ranges and conditionals);
- ``accel``: Django answers the preconditions (304, 412) and hands the file to nginx
  (X-Accel-Redirect), which serves ranges, If-Range and HEAD; no Python thread waits on a client.
  A request without preconditions for a binary the process served before is answered the same by
  the async front, without Django's middleware, a thread or a statement (rollout/api/download_answers.py);
- ``none``: Django serves it all itself, ranges included (core/ranges.py), as nginx would.
"""

from __future__ import annotations

from typing import IO

from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.http.response import HttpResponseBase
from django.utils.cache import get_conditional_response
from django.views.decorators.csrf import csrf_exempt

from core.errors import NotFound
from core.ranges import UNSATISFIABLE, WHOLE, ByteRange, requested_range, unsatisfied_content_range
from rollout.api.download_answers import accel_headers, representation_headers
from rollout.registry import storage
from rollout.registry.binaries import (
    ServedBinary,
    release_binary_open,
    release_binary_served,
    release_binary_served_keep,
)

SAFE_METHODS = ("GET", "HEAD")
_BLOCK = 256 << 10  # Django's own reads when the server has no sendfile (runserver, the test client)


@csrf_exempt  # no cookie, no state: any other method gets the API's 405, not a CSRF page
def download_binary(request: HttpRequest, version: str, platform: str) -> HttpResponseBase:
    if request.method not in SAFE_METHODS:
        response = _error(405, "method_not_allowed", f"Downloads answer {' and '.join(SAFE_METHODS)} only.")
        response["Allow"] = ", ".join(SAFE_METHODS)
        return response
    try:
        binary = release_binary_served(version=version, platform=platform)
    except NotFound as exc:
        return _error(404, "not_found", exc.detail)
    mode = storage.offload()
    if mode is storage.Offload.REDIRECT:
        return _redirect(request, binary)
    headers = representation_headers(binary)
    # If-Match, If-Unmodified-Since, If-None-Match (304), in RFC 9110's order; the ETag is strong.
    # Django's helper answers 304 or 412, or hands back the response it was given.
    proceed = HttpResponse(headers=headers)
    answer = get_conditional_response(request, etag=headers["ETag"], response=proceed)
    if answer is not None and answer is not proceed:
        return answer
    if mode is storage.Offload.ACCEL:
        release_binary_served_keep(binary=binary)
        return HttpResponse(headers=accel_headers(binary))
    return _serve(request, binary, headers)


def _redirect(request: HttpRequest, binary: ServedBinary) -> HttpResponse:
    url = storage.presigned_url(
        binary.storage_name, method=request.method or "GET", version=binary.version, platform=binary.platform
    )
    response = HttpResponseRedirect(url)
    # The URL expires: no cache may keep this answer longer than it lives.
    response["Cache-Control"] = "no-store"
    response["X-Checksum-Sha256"] = binary.sha256
    return response


def _serve(request: HttpRequest, binary: ServedBinary, headers: dict[str, str]) -> HttpResponseBase:
    """Django moves the bytes itself (``none``): the whole file, one range of it, or 416."""
    wanted = requested_range(
        request.headers.get("Range"), size=binary.size, if_range=request.headers.get("If-Range"), etag=headers["ETag"]
    )
    if wanted is UNSATISFIABLE:
        refusal = _error(416, "range_not_satisfiable", f"The binary has {binary.size} bytes.")
        refusal["Content-Range"] = unsatisfied_content_range(binary.size)
        refusal["X-Checksum-Sha256"] = binary.sha256
        return refusal
    span = ByteRange(start=0, end=binary.size - 1, size=binary.size) if wanted is WHOLE else wanted
    if request.method == "HEAD":
        response: HttpResponseBase = HttpResponse(headers=headers)
    else:
        try:
            handle = release_binary_open(binary=binary)
        except NotFound as exc:
            return _error(404, "not_found", exc.detail)
        streamed = FileResponse(_FileSlice(handle, span), content_type=headers["Content-Type"])
        streamed.block_size = _BLOCK
        for name, value in headers.items():
            streamed[name] = value
        response = streamed
    response["Content-Length"] = str(span.length)
    if wanted is not WHOLE:
        response.status_code = 206
        response["Content-Range"] = span.content_range
    return response


class _FileSlice:
    """Bytes ``span`` of an open file. FileResponse reads it; a server with sendfile (gunicorn) sends
    ``Content-Length`` bytes from the file's descriptor at its current offset, ``span.start``."""

    def __init__(self, handle: IO[bytes], span: ByteRange):
        handle.seek(span.start)
        self._handle = handle
        self._left = max(0, span.length)

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        chunk = self._handle.read(self._left if size < 0 else min(size, self._left))
        self._left -= len(chunk)
        return chunk

    def fileno(self) -> int:
        return self._handle.fileno()

    def close(self) -> None:
        self._handle.close()


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail}, status=status)
