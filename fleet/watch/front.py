"""The web tier's ASGI application: agent sessions answered in async code, everything else by Django.

``/api/compute/agent/session`` is the hot path of a fleet, and its ``POST`` the only request that may be held
(docs/fleet.md#watch). This front answers it without Django's request machinery: the body is parsed by the
same function as the synchronous fast path (``fleet.api.agent_session.session_request``), the session's service
(one statement: a plain heartbeat's, or a join's, after the heartbeat's when it was not one: ``agent_session_arrival``)
runs on one of this process's threads for a moment, and a held request then waits on the process's ``WatchHub``
holding no thread and no database connection. A leave (``DELETE``) is one UPDATE on such a thread. Anything else,
and every session request it does not take (a refusal, an unknown or malformed token, a bad body, a body without
Content-Length or over 1 MiB), goes to Django's WSGI application on a pool of threads, unchanged (its middleware,
DRF, its errors). A plug-in may answer a ``GET`` or ``HEAD`` here too, from what its process holds
(``fleet.plugins.register_quick_answers``: rollout's downloads, handed to nginx). docs/architecture.md#watch says
why this shape and what it measured.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

import structlog
from django.utils import timezone
from prometheus_client import Counter

from core.database import DATABASE_ERRORS, database_unavailable
from core.middleware import MAX_BODY_BYTES
from fleet.api.agent_session import ANSWER_AT_ONCE_SCOPE_KEY, SessionRequest, session_answer_bytes, session_request
from fleet.api.limits import COUNTED_SCOPE_KEY, request_throttled
from fleet.plugins import session_fields
from fleet.services.liveness import PULSE_EVERY, pulse_heard
from fleet.services.nodes import heartbeat_seconds
from fleet.services.sessions import (
    SessionReport,
    agent_heartbeat,
    agent_session_arrival,
    agent_session_leave_for_token,
    last_seen_due,
)
from fleet.services.watch import held_sessions_read, held_sessions_touch, held_touch_every, touched_within
from fleet.tokens import bearer_token, token_hash
from fleet.watch.admission import Admission, held
from fleet.watch.asgi import (
    DjangoOnThreads,
    Receive,
    Scope,
    Send,
    disconnected,
    host_allowed,
    read_body,
    replay,
    security_headers,
    terminated,
)
from fleet.watch.fields import FreshFields
from fleet.watch.hub import NodeKey, WatchHub, node_key
from fleet.watch.known import Known
from fleet.watch.quick import plug_in_answer
from fleet.watch.reads import WakeReads
from fleet.watch.threads import SessionThreads, on_thread

log = structlog.get_logger(__name__)

T = TypeVar("T")

SESSION_PATH = "/api/compute/agent/session"
# What DRF adds to AgentSessionView's 204 (the leave), so that both tiers answer alike.
LEAVE_HEADERS = [(b"allow", b"POST, DELETE, OPTIONS")]
SERVER_ERROR = json.dumps({"code": "server_error", "detail": "Internal server error."}).encode()
ARRIVALS = Counter(
    "fleet_watch_arrivals",
    "Held session requests by how their arrival was read: 'database' (a statement) or 'memory' (fleet/watch/known.py).",
    ["read"],
)


class AgentSessionFront:
    """The ASGI application (``project/asgi.py``): see the module docstring."""

    def __init__(
        self, *, wsgi_application: Callable[..., Any], threads: int, hub: WatchHub, admission: Admission
    ) -> None:
        self.admission = admission  # at most so many session requests under way, held ones not counted
        self.django = DjangoOnThreads(terminated(wsgi_application), workers=threads)
        # The sessions' statements have threads of their own: a slow admin page never delays a heartbeat.
        self.threads, self.hub = SessionThreads(threads), hub
        hub.before_resync = self._touch_held
        self.wake_reads = WakeReads(lambda tokens: self._run(held_sessions_read, token_hashes=tokens))
        self.headers = security_headers()
        self._keeper: asyncio.Task[None] | None = None
        self.fields = FreshFields(lambda: self._run(session_fields))
        self._pulsed_at = -math.inf
        self._background: set[asyncio.Task[Any]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] == SESSION_PATH and host_allowed(scope):
            if scope["method"] == "POST":
                await self.admission.serve(self._session, scope, receive, send)
            elif scope["method"] == "DELETE":
                await self.admission.serve(self._leave, scope, receive, send)
            else:
                await self.django(scope, receive, send)
        elif scope["type"] == "http" and (answer := plug_in_answer(scope)) is not None:
            extra = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers]
            await self._respond(send, answer.body, status=answer.status, content_type=None, extra=extra)
        else:  # a Host that ALLOWED_HOSTS refuses included: Django answers it 400
            await self.django(scope, receive, send)

    # -- lifespan: the keeper; answering held requests when the server stops ------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._start()
                self.hub.release_on_exit_signals()
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
        """Every half interval, ``_touch_held``: then each held node's ``last_seen_at`` is at most half an interval
        old (written now, or not due) and its session records this process as its watcher, which lets its next
        arrival be held from memory (fleet/watch/known.py)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(held_touch_every())
            self.hub.known.forget_expired(loop.time())
            try:
                await self._touch_held()
            except Exception as exc:  # the database is down: the next round tries again
                log.warning("fleet.watch.touch_failed", error=f"{type(exc).__name__}: {exc}"[:300])

    async def _touch_held(self) -> None:
        """``held_sessions_touch`` of the nodes held here, watched by this process (the keeper's round; a resync's)."""
        if node_ids := self.hub.held_node_ids():
            await self._run(held_sessions_touch, node_ids=node_ids, now=(now := timezone.now()), watcher=self.hub.ident)
            self.hub.known.touched(node_ids, seen_floor=now.timestamp() - touched_within())

    # -- the session request ------------------------------------------------------------------

    async def _run(self, function: Callable[..., T], /, **kwargs: Any) -> T:
        return await self.threads.run(on_thread, function=function, kwargs=kwargs)

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
            await self.django(scope, receive, send)
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
            await self.django(scope, receive, send)
            return
        await self._respond(send, b"", status=204, content_type=None, extra=LEAVE_HEADERS)

    async def _session(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {name: value.decode("latin-1") for name, value in scope["headers"]}
        if not await self._counted(scope, headers, send):
            return
        scope[ANSWER_AT_ONCE_SCOPE_KEY] = True  # Django never holds one on its threads: this front holds
        length = headers.get(b"content-length", "")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            await self.django(scope, receive, send)  # its 413, 400 or chunked body
            return
        body = await read_body(receive)
        request = session_request(
            authorization=headers.get(b"authorization"),
            content_type=headers.get(b"content-type", "").split(";")[0].strip().lower(),
            accept=headers.get(b"accept", "*/*"),
            body=body,
        )
        if request is None:
            await self.django(scope, replay(body, receive), send)
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
            await self._respond(send, session_answer_bytes(await self.fields.fresh(report)))

    async def _answer(
        self, request: SessionRequest, scope: Scope, receive: Receive, send: Send, body: bytes
    ) -> SessionReport | None:
        """The report to answer with; None when the answer was sent already (by Django) or nobody waits."""
        loop = asyncio.get_running_loop()
        hashed = token_hash(request.token)
        if request.wait is not None:
            await self.hub.start()  # subscribed before the revision is read: no change can fall in between
            known = self._known(request, hashed)
            if known is not None:
                ARRIVALS.labels(read="memory").inc()
                self._pulse()
                deadline = loop.time() + (request.wait or 0)
                return await self._hold(request, hashed, known.report, known.node_id, known.since, deadline, receive)
            ARRIVALS.labels(read="database").inc()
        since = loop.time()
        # A plain heartbeat, or else a join or a version change (services/sessions.py), held too if it repeats seen.
        report = await self._heartbeat(request, hashed, arrival=True)
        if report is None:  # an unknown token: Django's 401
            await self.django(scope, replay(body, receive), send)
            return None
        if request.held_for != report.spec_revision or report.node_id is None:
            return report
        deadline = since + (request.wait or 0)
        return await self._hold(request, hashed, report, node_key(report.node_id), since, deadline, receive)

    async def _heartbeat(self, request: SessionRequest, hashed: str, *, arrival: bool = False) -> SessionReport | None:
        """A plain heartbeat's statement (None: not one); a watching agent's read is remembered (``_known``). An
        ``arrival`` that is not a plain heartbeat (or ``likely_join``) is a join, in the same thread hop."""
        since, now = asyncio.get_running_loop().time(), timezone.now()
        statement = partial(agent_session_arrival, join_first=request.likely_join) if arrival else agent_heartbeat
        version, protocol = request.daemon_version, request.protocol_version
        watcher = self.hub.ident if request.wait is not None else None  # a watching agent's read is remembered here
        report = await self._run(
            statement, token_hash=hashed, now=now, daemon_version=version, protocol_version=protocol, watcher=watcher
        )
        if report is not None:
            self.fields.seen(since, report.fields)
            if request.wait is not None and report.node_id is not None:
                # last_seen_at is now (a join wrote it) or within an interval of now (written, or not due).
                floor = now.timestamp() - (0 if report.joined else heartbeat_seconds())
                self.hub.remember(hashed, Known(node_key(report.node_id), report, version, protocol, since, floor))
        return report

    async def _reread(self, request: SessionRequest, hashed: str) -> SessionReport | None:
        """A woken hold's read: with the others woken meanwhile, writing nothing (fleet/watch/reads.py), when the
        arrival's statement would write nothing either (its session as the arrival left it, ``last_seen_at`` not
        due); else that statement runs (a session that left, rejoined or changed; a node to count seen again)."""
        since = asyncio.get_running_loop().time()
        read = await self.wake_reads.read(hashed)
        daemon, protocol = request.daemon_version, request.protocol_version
        if (
            read is None
            or read.last_seen_at is None
            or not read.is_plain_heartbeat(daemon, protocol)
            or last_seen_due(last_seen_at=read.last_seen_at, now=timezone.now())
        ):
            return await self._heartbeat(request, hashed)
        self._pulse()
        self.fields.seen(since, read.report.fields)
        # The stored last_seen_at is the floor: a write that moves it back is notified (fleet/watch/known.py).
        floor = read.last_seen_at.timestamp()
        self.hub.remember(hashed, Known(node_key(read.node_id), read.report, daemon, protocol, since, floor))
        return read.report

    def _known(self, request: SessionRequest, hashed: str) -> Known | None:
        """The read to hold this arrival on without a statement, if any (fleet/watch/known.py lists the rules)."""
        known = self.hub.known.get(hashed)
        if known is None or known.report.spec_revision != request.seen:
            return None
        now = asyncio.get_running_loop().time()
        if (known.daemon_version, known.protocol_version) != (request.daemon_version, request.protocol_version):
            return None
        if now >= known.until:
            return None
        changed = self.hub.notified_since(known.node_id, known.since, besides=known.report.written_by)
        if not self.hub.unbroken_since(known.since) or changed:
            return None
        # The statement would write last_seen_at when it is an interval old: then it runs.
        if known.seen_floor <= time.time() - heartbeat_seconds():
            return None
        return known

    def _pulse(self) -> None:
        """An arrival answered from memory is heard too: the fleet's pulse, at most once per PULSE_EVERY here."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._pulsed_at < PULSE_EVERY.total_seconds():
            return
        self._pulsed_at = loop.time()
        self._in_background(self._run(pulse_heard, now=timezone.now()), "fleet.watch.pulse_failed")

    def _in_background(self, work: Coroutine[Any, Any, Any], failure: str) -> None:
        async def logged() -> None:
            try:
                await work
            except Exception as exc:  # the database is down: the keeper's next round writes the pulse too
                log.warning(failure, error=f"{type(exc).__name__}: {exc}"[:300])

        task = asyncio.get_running_loop().create_task(logged())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _hold(
        self,
        request: SessionRequest,
        hashed: str,
        report: SessionReport,
        node_id: NodeKey,
        since: float,
        deadline: float,
        receive: Receive,
    ) -> SessionReport | None:
        """Hold until the revision is not ``seen`` or ``wait`` passes; None when the agent hung up.

        A wake reads again (``_reread``: with the requests woken meanwhile, or the arrival's statement). At
        ``wait``, when the subscription was live from before the arrival's read and brought nothing for this node,
        nothing changed: the answer is the report read at arrival, without a statement. Otherwise (the
        subscription was lost meanwhile, or no NOTIFY) the answer is read again: a lost wake costs the wait,
        never a stale answer.
        """
        loop = asyncio.get_running_loop()
        held()  # a held request is no load (fleet/watch/admission.py)
        arrived = since
        hung_up = asyncio.ensure_future(disconnected(receive))

        def changed() -> bool:  # a notification since the read (but the join's own, whose read holds it)
            return self.hub.notified_since(node_id, since, besides=report.written_by)

        try:
            with self.hub.holding(node_id):
                while True:
                    remaining = deadline - loop.time()
                    if remaining > 0 and not changed() and not self.hub.relistened_since(since):
                        wake = self.hub.next_wake(node_id)
                        done, _ = await asyncio.wait({wake, hung_up}, timeout=remaining, return_when="FIRST_COMPLETED")
                        self.hub.forget(node_id, wake)
                        if hung_up in done:  # kept online until now by the keeper; nobody to answer
                            return None
                    if not changed() and self.hub.unbroken_since(arrived):
                        if loop.time() < deadline:  # woken by the join's own notification (its read holds it)
                            continue
                        return report  # at wait, nothing changed (or shutting down): the same answer
                    since = loop.time()
                    fresh = await self._reread(request, hashed)
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
