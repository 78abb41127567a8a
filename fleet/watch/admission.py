"""Admission control for the agent-session front (docs/operations.md#admission-control).

When the whole fleet reconnects at once (the web tier restarted, a partition healed), a web process that takes
every request queues them on its few session threads and its one event loop until the agents time out, and each
agent that timed out has waited for nothing. Here a process takes at most ``WEB_SESSIONS_IN_PROGRESS`` agent
session requests (``POST`` and ``DELETE /api/compute/agent/session``) at a time; one more is refused at once,
before its body is read or its credential counted: 503 ``overloaded`` with ``Retry-After``.

A request counts from its arrival until it is answered, or until it is held (``held()``, from the front's hold):
a held request waits on the hub holding no thread and no connection, so held sessions never count as load.

``Retry-After`` hands out the seconds to come: the process keeps, for each of the next seconds, how many refused
agents it told to come back then, and tells the next one the first second (from 1 up to ``heartbeatSeconds``) that
is not full. A second is full when as many agents were told it as the process answered in its last whole second
(at least the bound: a process that has only just started has answered nothing yet). So the refused agents come
back at the rate the process answers, spread over the time it needs for them, instead of all at once again;
each agent adds a random fraction of a second of its own (docs/fleet.md#retries). When every second up to
``heartbeatSeconds`` is full, the least promised one is told: those agents may be refused again, and are told a
later second then. The rule is per process: each process refuses in proportion to the load it receives.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from prometheus_client import Counter

from fleet.services.nodes import heartbeat_seconds
from fleet.watch.asgi import Receive, Scope, Send, security_headers

REFUSED = Counter(
    "fleet_watch_overloaded",
    "Agent session requests refused at once (503 overloaded): the web process had WEB_SESSIONS_IN_PROGRESS under way.",
)


class _Slot:
    """One admitted request's place in the count: given back once, when it is answered or held."""

    __slots__ = ("admission", "counted")

    def __init__(self, admission: Admission) -> None:
        self.admission, self.counted = admission, True

    def release(self) -> None:
        if self.counted:
            self.counted = False
            self.admission._released()


#: The admitted request of the running task (each ASGI request runs in a task of its own).
_current: ContextVar[_Slot | None] = ContextVar("rollout_admission_slot", default=None)


def held() -> None:
    """The running request is now held: it no longer counts against its process's bound."""
    slot = _current.get()
    if slot is not None:
        slot.release()


class Admission:
    """At most ``bound`` agent session requests under way in this process (0: no bound); use from its event loop."""

    def __init__(
        self,
        *,
        bound: int,
        longest: Callable[[], float] = heartbeat_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bound = bound
        self.longest = longest  # the longest Retry-After, in seconds
        self.clock = clock
        self.in_progress = 0
        self._second = -1  # the whole second of the clock being counted, and what was answered in it
        self._answered_now = 0
        self._answered_last = 0  # in the whole second before it
        self._promised: dict[int, int] = {}  # whole second of the clock -> refused agents told to come back then

    async def serve(
        self, handler: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """``handler``'s answer if the request is admitted, else a 503 ``overloaded`` at once."""
        if self.bound and self.in_progress >= self.bound:
            await self._refuse(send)
            return
        self.in_progress += 1
        slot = _Slot(self)
        token = _current.set(slot)
        try:
            await handler(scope, receive, send)
        finally:
            slot.release()
            _current.reset(token)

    def _released(self) -> None:
        self.in_progress -= 1
        self._tick()
        self._answered_now += 1

    def _tick(self) -> int:
        second = math.floor(self.clock())
        if second != self._second:
            self._answered_last = self._answered_now if second == self._second + 1 else 0
            self._second, self._answered_now = second, 0
        return second

    def retry_after(self) -> int:
        """The whole seconds the next refused agent is told to wait (the module docstring's rule)."""
        now = self._tick()
        per_second = max(self._answered_last, self.bound, 1)
        longest = max(1, math.floor(self.longest()))
        if len(self._promised) > 4 * longest:  # seconds gone by are forgotten now and then, not per refusal
            self._promised = {second: n for second, n in self._promised.items() if second > now}
        counts = [self._promised.get(now + wait, 0) for wait in range(1, longest + 1)]
        wait = next((n for n, count in enumerate(counts, 1) if count < per_second), None)
        if wait is None:
            wait = counts.index(min(counts)) + 1
        self._promised[now + wait] = counts[wait - 1] + 1
        return wait

    async def _refuse(self, send: Send) -> None:
        REFUSED.inc()
        wait = self.retry_after()
        body = json.dumps(
            {
                "code": "overloaded",
                "detail": f"The server is answering as many agents as it can; retry in {wait} s.",
                "retryAfter": wait,
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *security_headers(),
            (b"retry-after", str(wait).encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
