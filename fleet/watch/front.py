"""The web tier's ASGI application: agent sessions answered in async code, everything else by Django.

``/api/compute/agent/session`` is the hot path of a fleet, and its ``POST`` the only request that may be held
(docs/fleet.md#watch). This front answers it without Django's request machinery: the body is parsed by the
same function as the synchronous fast path (``fleet.api.agent_session.session_request``), the session's service
(a plain heartbeat's one statement, ``agent_heartbeat``; a join or a version change, ``agent_session_report``)
runs on one of this process's threads for a moment, and a held request then waits on the process's
``WatchHub`` holding no thread and no database connection. A leave (``DELETE``) is one UPDATE on such a thread.
Anything else, and every session request it does not take (a refusal, an unknown or malformed token, a bad
body, a body without Content-Length or over 1 MiB), goes to Django's WSGI application on a pool of threads,
unchanged (its middleware, DRF, its errors). docs/architecture.md#watch says why this shape and what it measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

import structlog
from a2wsgi import WSGIMiddleware
from django.conf import settings
from django.db import close_old_connections, connection

from core.database import DATABASE_ERRORS, database_unavailable
from core.middleware import MAX_BODY_BYTES
from core.statements import commit_without_flush_wait
from fleet.api.agent_session import ANSWER_AT_ONCE_SCOPE_KEY, SessionRequest, session_answer_bytes, session_request
from fleet.api.limits import COUNTED_SCOPE_KEY, request_throttled
from fleet.services.sessions import (
    SessionReport,
    agent_heartbeat,
    agent_session_leave_for_token,
    agent_session_report_for_token,
)
from fleet.services.watch import held_sessions_touch, held_touch_every
from fleet.tokens import bearer_token, token_hash
from fleet.watch.hub import WatchHub
from fleet.watch.threads import SessionThreads

log = structlog.get_logger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
T = TypeVar("T")

SESSION_PATH = "/api/compute/agent/session"
# What DRF adds to AgentSessionView's 204 (the leave), so that both tiers answer alike.
LEAVE_HEADERS = [(b"allow", b"POST, DELETE, OPTIONS")]
SERVER_ERROR = json.dumps({"code": "server_error", "detail": "Internal server error."}).encode()


def _security_headers() -> list[tuple[bytes, bytes]]:
    """What Django's SecurityMiddleware and XFrameOptionsMiddleware add to the same answer."""
    headers = {
        b"x-frame-options": getattr(settings, "X_FRAME_OPTIONS", "DENY"),
        b"x-content-type-options": "nosniff" if getattr(settings, "SECURE_CONTENT_TYPE_NOSNIFF", True) else None,
        b"referrer-policy": getattr(settings, "SECURE_REFERRER_POLICY", "same-origin"),
        b"cross-origin-opener-policy": getattr(settings, "SECURE_CROSS_ORIGIN_OPENER_POLICY", "same-origin"),
    }
    return [(name, str(value).encode()) for name, value in headers.items() if value]


def _terminated(application: Callable[..., Any]) -> Callable[..., Any]:
    """The WSGI app, told that its input ends where the body does (a chunked body is bounded by
    core.middleware.BodySizeLimitMiddleware, as under gunicorn, which sets the same flag)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        environ.setdefault("wsgi.input_terminated", True)
        return application(environ, start_response)

    return app


class AgentSessionFront:
    """The ASGI application (``project/asgi.py``): see the module docstring."""

    def __init__(self, *, wsgi_application: Callable[..., Any], threads: int, hub: WatchHub) -> None:
        self.django = WSGIMiddleware(_terminated(wsgi_application), workers=threads)
        # The sessions' statements have threads of their own: a slow admin page never delays a heartbeat.
        self.threads = SessionThreads(threads)
        self.hub = hub
        self.headers = _security_headers()
        self._keeper: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] == SESSION_PATH and scope["method"] == "POST":
            await self._session(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] == SESSION_PATH and scope["method"] == "DELETE":
            await self._leave(scope, receive, send)
        else:
            await self.django(scope, receive, send)  # type: ignore[arg-type]

    # -- lifespan: the keeper; answering held requests when the server stops ------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._start()
                _release_on_exit_signals(self.hub)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.hub.stop()
                if self._keeper is not None:
                    self._keeper.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _start(self) -> None:
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._keep_held_online(), name="watch-keeper")

    async def _keep_held_online(self) -> None:
        """Every half interval, one UPDATE counts a heartbeat of each node this process holds (services/watch.py)."""
        while True:
            await asyncio.sleep(held_touch_every())
            node_ids = self.hub.held_node_ids()
            if node_ids:
                try:
                    await self._run(held_sessions_touch, node_ids=node_ids)
                except Exception as exc:  # the database is down: the next round tries again
                    log.warning("fleet.watch.touch_failed", error=f"{type(exc).__name__}: {exc}"[:300])

    # -- the session request ------------------------------------------------------------------

    async def _run(self, function: Callable[..., T], /, **kwargs: Any) -> T:
        return await self.threads.run(_on_thread, function=function, kwargs=kwargs)

    async def _counted(self, scope: Scope, headers: dict[bytes, str], send: Send) -> bool:
        """Count the request once, on arrival, whoever answers it (docs/operations.md#request-limits); Django is
        told so. False, and the 429 sent, when it is over its credential's limit."""
        throttled = request_throttled(path=scope["path"], authorization=headers.get(b"authorization"))
        if throttled is not None:
            retry = [(b"retry-after", str(throttled.wait).encode())]
            await self._respond(send, json.dumps(throttled.body()).encode(), status=429, extra=retry)
            return False
        scope[COUNTED_SCOPE_KEY] = True
        return True

    async def _leave(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``DELETE`` session: one UPDATE on a session thread, 204. Django answers an unknown or malformed token
        (401) and a request with a body (the API takes none: whatever Django makes of it)."""
        headers = {name: value.decode("latin-1") for name, value in scope["headers"]}
        if not await self._counted(scope, headers, send):
            return
        token = bearer_token(headers.get(b"authorization"))
        accept = headers.get(b"accept", "*/*")
        body = headers.get(b"content-length", "0") != "0" or b"transfer-encoding" in headers
        if token is None or body or not ("*/*" in accept or "json" in accept):
            await self.django(scope, receive, send)  # type: ignore[arg-type]
            return
        try:
            left = await self._run(agent_session_leave_for_token, token_hash=token_hash(token))
        except DATABASE_ERRORS as exc:
            await self._unavailable(send, exc)
            return
        except Exception:  # as project/urls.py's handler500
            log.exception("fleet.watch.leave_failed")
            await self._respond(send, SERVER_ERROR, status=500)
            return
        if left is None:
            await self.django(scope, receive, send)  # type: ignore[arg-type]
            return
        await self._respond(send, b"", status=204, content_type=None, extra=LEAVE_HEADERS)

    async def _session(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {name: value.decode("latin-1") for name, value in scope["headers"]}
        if not await self._counted(scope, headers, send):
            return
        scope[ANSWER_AT_ONCE_SCOPE_KEY] = True  # Django never holds one on its threads: this front holds
        length = headers.get(b"content-length", "")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            await self.django(scope, receive, send)  # type: ignore[arg-type]  # its 413, 400 or chunked body
            return
        body = await _read_body(receive)
        request = session_request(
            authorization=headers.get(b"authorization"),
            content_type=headers.get(b"content-type", "").split(";")[0].strip().lower(),
            accept=headers.get(b"accept", "*/*"),
            body=body,
        )
        if request is None:
            await self.django(scope, _replay(body, receive), send)  # type: ignore[arg-type]
            return
        self._start()  # without lifespan events (some servers, the tests' clients) too
        try:
            report = await self._answer(request, scope, receive, send, body)
        except DATABASE_ERRORS as exc:
            await self._unavailable(send, exc)
            return
        except Exception:  # as project/urls.py's handler500: the API's JSON body, never a bare 500 page
            log.exception("fleet.watch.session_failed")
            await self._respond(send, SERVER_ERROR, status=500)
            return
        if report is not None:
            await self._respond(send, session_answer_bytes(report))

    async def _answer(
        self, request: SessionRequest, scope: Scope, receive: Receive, send: Send, body: bytes
    ) -> SessionReport | None:
        """The report to answer with; None when the answer was sent already (by Django) or nobody waits."""
        loop = asyncio.get_running_loop()
        hashed = token_hash(request.token)
        if request.wait is not None:
            await self.hub.start()  # subscribed before the revision is read: no change can fall in between
        since = loop.time()
        report = await self._heartbeat(request, hashed)
        if report is None:
            # Not a plain heartbeat: a join or a version change (services/sessions.py), held too if it repeats seen.
            since = loop.time()
            report = await self._run(
                agent_session_report_for_token,
                token_hash=hashed,
                daemon_version=request.daemon_version,
                protocol_version=request.protocol_version,
            )
        if report is None:  # an unknown token: Django's 401
            await self.django(scope, _replay(body, receive), send)  # type: ignore[arg-type]
            return None
        if request.held_for != report.spec_revision or report.node_id is None:
            return report
        return await self._hold(request, hashed, report, report.node_id, since, receive)

    async def _heartbeat(self, request: SessionRequest, hashed: str) -> SessionReport | None:
        return await self._run(
            agent_heartbeat,
            token_hash=hashed,
            daemon_version=request.daemon_version,
            protocol_version=request.protocol_version,
        )

    async def _hold(
        self, request: SessionRequest, hashed: str, report: SessionReport, node_id: Any, since: float, receive: Receive
    ) -> SessionReport | None:
        """Hold until the revision is not ``seen`` or ``wait`` passes; None when the agent hung up.

        A wake reads again (a heartbeat: touch and answer). At ``wait``, when the subscription was live from
        before the arrival's read and brought nothing for this node, nothing changed: the answer is the report
        read at arrival, without a statement. Otherwise (the subscription was lost meanwhile, or no NOTIFY) the
        answer is read again: a lost wake costs the wait, never a stale answer.
        """
        loop = asyncio.get_running_loop()
        deadline = since + (request.wait or 0)
        arrived = since
        hung_up = asyncio.ensure_future(_disconnected(receive))
        try:
            with self.hub.holding(node_id):
                while True:
                    remaining = deadline - loop.time()
                    if remaining > 0 and not self.hub.notified_since(node_id, since):
                        wake = self.hub.next_wake(node_id)
                        done, _ = await asyncio.wait({wake, hung_up}, timeout=remaining, return_when="FIRST_COMPLETED")
                        self.hub.forget(node_id, wake)
                        if hung_up in done:  # kept online until now by the keeper; nobody to answer
                            return None
                    if not self.hub.notified_since(node_id, since) and self.hub.unbroken_since(arrived):
                        return report  # at wait, nothing changed (or shutting down): the same answer
                    since = loop.time()
                    fresh = await self._heartbeat(request, hashed)
                    if fresh is None:  # the session ended meanwhile (left, or another version joined)
                        return report
                    report = fresh
                    if report.spec_revision != request.seen or loop.time() >= deadline or self.hub.closing:
                        return report
        finally:
            hung_up.cancel()

    async def _unavailable(self, send: Send, exc: Exception) -> None:
        unavailable = database_unavailable(exc)
        await self._respond(send, unavailable.content, status=503, extra=[(b"retry-after", b"5")])

    async def _respond(
        self,
        send: Send,
        content: bytes,
        *,
        status: int = 200,
        content_type: bytes | None = b"application/json",
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [
            *([(b"content-type", content_type)] if content_type else []),
            (b"content-length", str(len(content)).encode()),
            *self.headers,
            *(extra or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def _on_thread(*, function: Callable[..., T], kwargs: dict[str, Any]) -> T:
    """``function(**kwargs)`` on a session thread, whose Django connection persists across calls.

    Its commits do not wait for the WAL flush (core/statements.py ``commit_without_flush_wait``). No request
    signals run here. A connection the database dropped (it restarted since this thread last
    used it) is closed as Django's request cycle would close it, and the call runs once more on a new
    connection: the first heartbeat after a restart is answered, not refused with a 503. Running any
    function run here twice is harmless: a heartbeat and a touch write the time, a leave is idempotent, and
    a join whose first try committed is a heartbeat the second time. A database that is down fails the
    second try too (503, ``database_unavailable``).
    """
    try:
        commit_without_flush_wait()
        return function(**kwargs)
    except DATABASE_ERRORS:
        close_old_connections()
        if connection.connection is not None:  # still usable: the statement failed, not the connection
            raise
    commit_without_flush_wait()
    return function(**kwargs)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away: what was read is all there is
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then what the client's connection says (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _disconnected(receive: Receive) -> None:
    """Returns when the client hangs up (the body was read already: the next message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _release_on_exit_signals(hub: WatchHub) -> None:
    """SIGTERM/SIGINT (the server stopping): held requests answer at once rather than hold the shutdown.

    Chained in front of the server's own handlers (installed before the application starts), in the main thread.
    """
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if not callable(previous):
            continue

        def handler(number: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
            loop.call_soon_threadsafe(hub.release_all)
            previous(number, frame)

        with contextlib.suppress(ValueError):  # not the main thread: the server stops held requests at their wait
            signal.signal(signum, handler)
