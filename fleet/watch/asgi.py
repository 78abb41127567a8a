"""The ASGI plumbing of the agent-session front (front.py): its message types, reading and replaying a request's
body, noticing a client that hung up, and the headers Django would have added."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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
