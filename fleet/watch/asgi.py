"""The ASGI plumbing of the agent-session front (front.py): its message types, reading and replaying a request's
body, noticing a client that hung up, the headers Django would have added, and the bridge to Django's threads."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from a2wsgi.wsgi import WSGIMiddleware, WSGIResponder
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def host_allowed(scope: Scope) -> bool:
    """Whether Django would take this request's Host (``ALLOWED_HOSTS``, read as ``HttpRequest.get_host`` reads it
    from the environ a2wsgi builds: repeated headers joined by commas, ``localhost:80`` without a server): a request
    it would refuse is left to Django, which answers 400."""
    names = {b"host": "HTTP_HOST"}
    if settings.USE_X_FORWARDED_HOST:
        names[b"x-forwarded-host"] = "HTTP_X_FORWARDED_HOST"
    if settings.USE_X_FORWARDED_PORT:
        names[b"x-forwarded-port"] = "HTTP_X_FORWARDED_PORT"
    meta: dict[str, str] = {}
    for name, value in scope["headers"]:
        if (key := names.get(name)) is not None:
            text = value.decode("latin-1")
            meta[key] = f"{meta[key]},{text}" if key in meta else text
    server_name, server_port = scope.get("server") or ("localhost", 80)
    meta["SERVER_NAME"], meta["SERVER_PORT"] = str(server_name), str(server_port or 0)
    request_key = tuple(sorted(meta.items()))
    settings_key = (
        tuple(settings.ALLOWED_HOSTS), settings.USE_X_FORWARDED_HOST, settings.USE_X_FORWARDED_PORT, settings.DEBUG,
    )  # fmt: skip
    if sum(len(value) for value in meta.values()) > MAX_CACHED_HOST:  # no host name is that long: not kept
        return _host_valid(request_key, settings_key)
    return _host_valid_cached(request_key, settings_key)


#: Longest Host (with the server's name and port) whose verdict a process keeps: a DNS name has at most 253.
MAX_CACHED_HOST = 300


def _host_valid(meta: tuple[tuple[str, str], ...], settings_key: tuple[object, ...]) -> bool:
    request = HttpRequest()
    request.META = dict(meta)
    try:
        request.get_host()
    except DisallowedHost:
        return False
    return True


# A fleet sends a few Host values; the settings are in the key so that a test's override is obeyed.
_host_valid_cached = functools.lru_cache(maxsize=256)(_host_valid)


def security_headers() -> list[tuple[bytes, bytes]]:
    """What Django's SecurityMiddleware and XFrameOptionsMiddleware add to the same answer."""
    headers = {
        b"x-frame-options": getattr(settings, "X_FRAME_OPTIONS", "DENY"),
        b"x-content-type-options": "nosniff" if getattr(settings, "SECURE_CONTENT_TYPE_NOSNIFF", True) else None,
        b"referrer-policy": getattr(settings, "SECURE_REFERRER_POLICY", "same-origin"),
        b"cross-origin-opener-policy": getattr(settings, "SECURE_CROSS_ORIGIN_OPENER_POLICY", "same-origin"),
    }
    return [(name, str(value).encode()) for name, value in headers.items() if value]


def terminated(application: Callable[..., Any]) -> Callable[..., Any]:
    """The WSGI app, told that its input ends where the body does (a chunked body is bounded by
    core.middleware.BodySizeLimitMiddleware, as under gunicorn, which sets the same flag)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        environ.setdefault("wsgi.input_terminated", True)
        return application(environ, start_response)

    return app


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away: what was read is all there is
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then what the client's connection says (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def disconnected(receive: Receive) -> None:
    """Returns when the client hangs up (the body was read already: the next message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


#: An answer up to this size (and ``send_queue_size`` messages) is made whole on its thread and handed to the event
#: loop at once; a longer one streams, the thread waiting for the loop at each message, as a2wsgi does.
WHOLE_ANSWER_BYTES = 256 << 10


class DjangoOnThreads(WSGIMiddleware):
    """a2wsgi's WSGI-to-ASGI bridge, but a small answer does not hold its thread while the event loop sends it.

    a2wsgi hands each message of an answer (its start, each chunk of its body, its end) to the event loop and
    blocks the thread until the loop has taken it: three waits for the busiest thread of the process for even the
    smallest answer, while the thread is one of a few (``WEB_THREADS``). A round of a rollout sends hundreds of
    agents to the download at once (docs/benchmarks.md measured them queueing there). Here the messages are kept
    on the thread until the answer is complete or too large, then handed over in one call that does not wait.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            responder = _WholeAnswerResponder(self.app, self.executor, self.send_queue_size)
            return await responder(scope, receive, send)
        return await super().__call__(scope, receive, send)


class _WholeAnswerResponder(WSGIResponder):
    def __init__(self, app: Any, executor: Any, send_queue_size: int) -> None:
        super().__init__(app, executor, send_queue_size)
        self._kept: list[Any] | None = []  # None once streaming
        self._kept_bytes = 0

    def send(self, message: Any) -> None:  # on the WSGI thread
        if self._kept is None:
            super().send(message)
            return
        self._kept.append(message)
        self._kept_bytes += len(message.get("body", b""))
        complete = message["type"] == "http.response.body" and not message.get("more_body", False)
        room = self.send_queue.maxsize
        if complete and self._kept_bytes <= WHOLE_ANSWER_BYTES and len(self._kept) < room:
            kept, self._kept = self._kept, None
            self.loop.call_soon_threadsafe(_put_all, self.send_queue, kept)  # before the thread's end is seen
        elif complete or self._kept_bytes > WHOLE_ANSWER_BYTES or len(self._kept) >= room - 1:
            kept, self._kept = self._kept, None  # too long to keep: stream it, and what follows
            for kept_message in kept:
                super().send(kept_message)


def _put_all(queue: asyncio.Queue[Any], messages: list[Any]) -> None:
    for message in messages:
        queue.put_nowait(message)  # the queue is empty and has room: nothing was handed over before
