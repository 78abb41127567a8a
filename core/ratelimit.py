"""Request limits counted across every web process: sliding-window counters in a shared Redis.

See docs/operations.md#request-limits. A limit is a :class:`Rate`: at most ``requests`` per ``seconds``,
as a sliding window (the usual approximation: the current fixed window's count plus the previous one's,
weighted by how much of it the sliding window still covers).

Why counts are kept in the process and added to Redis in batches, rather than one Redis call per
request: a round trip costs the web process more CPU (with redis-py, a Lua script and the ``limits`` library
alike) than the 5 % of a plain heartbeat the heartbeat path may lose (``make bench ARGS=request-limits`` measures
what counting costs as it is, docs/benchmarks.md). Here a request costs a dictionary update under a lock; a
background thread of each process adds that process's new counts to Redis (one pipeline, at most every
:data:`FLUSH_SECONDS`; :data:`LAZY_FLUSH_SECONDS` for a lone request of a credential under half its limit) and
learns the totals of every process from the replies. So a credential is held to
its limit across all processes, give or take what each process lets through between two of its flushes.

When Redis cannot be reached the requests are not failed: the flushes fail (each failure counted in
``api_rate_limit_store_errors_total``), and each process goes on limiting what it sees itself.
Without a store (no ``CACHE_URL``: the demo, a single machine) the counting is per process (``manage.py check
--deploy`` warns, ``fleet.W001``).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import redis
from prometheus_client import Counter
from redis.backoff import NoBackoff
from redis.retry import Retry

#: A process adds a credential's new counts to the store at most this long after counting them...
FLUSH_SECONDS = 0.02
#: ... unless the credential's only unsent count here is one request and it has used under half its limit: then
#: at most this long after. A watching fleet's one request per agent a minute cost one Redis round trip each at
#: 20 ms; a second request of the same credential before the flush, as in any burst, flushes within FLUSH_SECONDS.
LAZY_FLUSH_SECONDS = 0.25
# Flushes are never closer than FLUSH_SECONDS: one pipeline per flush, whatever the number of credentials.

STORE_ERRORS = Counter(
    "api_rate_limit_store_errors",
    "Flushes of request counts to the shared store (CACHE_URL) that failed; limits were then per process.",
)

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400}
_UNITS.update({"day": 86400, "heartbeat": 0})
_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per\s)\s*(\d*)\s*([a-z]+?)s?\s*$", re.IGNORECASE)
#: ``<n>/heartbeat``: n per heartbeat interval, averaged over this long (or over one interval when longer).
HEARTBEAT_AVERAGE_SECONDS = 60


@dataclass(frozen=True)
class Rate:
    """At most ``requests`` per ``seconds`` (a sliding window)."""

    requests: int
    seconds: int

    def __str__(self) -> str:
        return f"{self.requests} per {self.seconds} s"


def parse_rate(text: str, *, heartbeat_seconds: int | None = None) -> Rate:
    """``1200/min``, ``30/2min``, ``5 per 10 s``, ``100/hour``; with ``heartbeat_seconds``, ``5/heartbeat``:
    5 per heartbeat interval averaged over a minute. ValueError with a sentence when it is none of these."""
    match = _RATE.match(text or "")
    unit = match.group(3).lower() if match else ""
    if match is None or unit not in _UNITS or (unit == "heartbeat" and match.group(2)):
        raise ValueError(f"{text!r} is not a rate such as 1200/min, 30/2min or 5/heartbeat")
    requests = int(match.group(1))
    if unit == "heartbeat":
        if heartbeat_seconds is None:
            raise ValueError(f"{text!r}: a rate per heartbeat is for agent tokens only")
        seconds = max(HEARTBEAT_AVERAGE_SECONDS, heartbeat_seconds)
        requests = requests * seconds // heartbeat_seconds
    else:
        seconds = int(match.group(2) or 1) * _UNITS[unit]
    if requests < 1 or not 1 <= seconds <= 86400:
        raise ValueError(f"{text!r}: at least 1 request, per 1 s to 1 day")
    return Rate(requests, seconds)


class CountStore(Protocol):
    """Where every process's counts meet."""

    def add(self, increments: Sequence[tuple[str, int, int]], reads: Sequence[str]) -> tuple[list[int], list[int]]:
        """Add each ``(bucket, count, ttl seconds)``; the buckets' new totals, and the totals of ``reads``."""
        ...


class RedisCountStore:
    """The counts in Redis: one integer key per credential and window, expiring after two windows."""

    def __init__(self, url: str) -> None:
        # Fail fast and never retry inside redis-py: a flush that fails is counted and its counts kept.
        self.redis = redis.Redis.from_url(
            url, socket_connect_timeout=0.5, socket_timeout=1, retry=Retry(NoBackoff(), 0), health_check_interval=25
        )

    def add(self, increments: Sequence[tuple[str, int, int]], reads: Sequence[str]) -> tuple[list[int], list[int]]:
        pipe = self.redis.pipeline(transaction=False)
        for bucket, count, ttl in increments:
            pipe.incrby(bucket, count)
            pipe.expire(bucket, ttl)
        for bucket in reads:
            pipe.get(bucket)
        replies = pipe.execute()
        added = [int(total) for total in replies[: 2 * len(increments) : 2]]
        read = [int(total or 0) for total in replies[2 * len(increments) :]]
        return added, read


@dataclass(slots=True)
class _Window:
    """One credential's count in one fixed window, as this process knows it."""

    ident: tuple[str, int, str]  # scope, window index, credential
    bucket: str
    ttl: int
    known: int = 0  # every process's total at the last flush (this process's flushed counts included)
    pending: int = 0  # counted here, not yet sent
    sending: int = 0  # in the flush under way
    fetched: bool = False  # ``known`` came from the store at least once

    @property
    def total(self) -> int:
        return self.known + self.pending + self.sending


@dataclass
class _Scope:
    rate: Rate
    windows: dict[int, dict[str, _Window]] = field(default_factory=dict)  # window index -> credential -> count


class SlidingWindowLimiter:
    """``hit(scope, key, rate)``: count one request of credential ``key``, or say how long it must wait."""

    def __init__(self, store: CountStore | None, *, prefix: str = "rl") -> None:
        self.store = store
        self.prefix = prefix
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a forked web worker starts with its own counts

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[str, _Scope] = {}
        self._dirty: set[tuple[str, int, str]] = set()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def hit(self, scope: str, key: str, rate: Rate, *, now: float | None = None) -> int | None:
        """None: allowed and counted. Else the whole seconds until a request of ``key`` would be allowed."""
        now = time.time() if now is None else now  # wall clock: every process's windows line up
        index, into = divmod(now, rate.seconds)
        window = int(index)
        with self._lock:
            current, previous = self._windows(scope, rate, key, window)
            weight = 1 - into / rate.seconds
            previous_total = previous.total if previous is not None else 0
            used = previous_total * weight + current.total + 1
            if used > rate.requests:
                return _retry_after(rate, into, current.total, previous_total)
            current.pending += 1
            self._dirty.add((scope, window, key))
        if self.store is not None:
            if self._thread is None:
                self._start()
            if current.pending > 1 or 2 * used >= rate.requests:  # a burst, or near its limit: others must know
                self._wake.set()
        return None

    def _windows(self, scope: str, rate: Rate, key: str, window: int) -> tuple[_Window, _Window | None]:
        entry = self._scopes.get(scope)
        if entry is None or entry.rate != rate:  # a new rate (settings changed): counting starts again
            entry = self._scopes[scope] = _Scope(rate)
        windows = entry.windows
        if window not in windows:
            windows[window] = {}
            for old in [index for index in windows if index < window - 1]:
                del windows[old]  # both windows this one weighs are kept; nothing older
        current = windows[window].get(key)
        if current is None:
            current = windows[window][key] = self._window(scope, rate, key, window)
        previous_counts = windows.get(window - 1)
        previous = previous_counts.get(key) if previous_counts is not None else None
        if previous is None and self.store is not None:
            # What other processes counted in the previous window: read at the next flush.
            previous = windows.setdefault(window - 1, {})[key] = self._window(scope, rate, key, window - 1)
            self._dirty.add((scope, window - 1, key))
        return current, previous

    def _window(self, scope: str, rate: Rate, key: str, window: int) -> _Window:
        bucket = f"{self.prefix}:{scope}:{key}:{window}"
        return _Window(ident=(scope, window, key), bucket=bucket, ttl=2 * rate.seconds + 5)

    # -- the flushes (one thread per process) -----------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rate-limit-flush", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(timeout=LAZY_FLUSH_SECONDS)
            self._wake.clear()
            self.flush()
            time.sleep(FLUSH_SECONDS)

    def stop(self) -> None:
        """End the flushing thread (a process's limiter lives as long as the process: for tests)."""
        self._stopped = True
        self._wake.set()

    def flush(self) -> None:
        """Send this process's new counts, learn every process's totals. Never raises."""
        store = self.store
        if store is None:
            return
        with self._lock:
            sending: list[_Window] = []
            reading: list[_Window] = []
            for scope, window, key in self._dirty:
                entry = self._scopes.get(scope)
                count = entry.windows.get(window, {}).get(key) if entry is not None else None
                if count is None:
                    continue  # dropped with its window
                if count.pending:
                    count.sending, count.pending = count.pending, 0
                    sending.append(count)
                elif not count.fetched:
                    reading.append(count)
            self._dirty.clear()
        if not sending and not reading:
            return
        try:
            added, read = store.add([(c.bucket, c.sending, c.ttl) for c in sending], [c.bucket for c in reading])
        except Exception:  # the store is down or refuses: keep the counts for the next flush, never fail requests
            STORE_ERRORS.inc()
            with self._lock:
                for count in sending:
                    count.pending += count.sending
                    count.sending = 0
                self._dirty.update(count.ident for count in sending + reading)
            self._wake.set()
            time.sleep(1)  # a store that is down is tried again about every second
            return
        with self._lock:
            for count, total in zip(sending, added, strict=True):
                count.known, count.sending, count.fetched = total, 0, True
            for count, total in zip(reading, read, strict=True):
                count.known, count.fetched = max(count.known, total), True


def _retry_after(rate: Rate, into: float, current: int, previous: int) -> int:
    """Whole seconds until one more request fits, if none comes meanwhile (at least 1)."""
    limit, seconds = rate.requests, rate.seconds
    if current + 1 <= limit:
        # Within this window, once the previous window's weight has fallen enough.
        needed = 1 - (limit - current - 1) / previous if previous else 0.0
        wait = needed * seconds - into
    else:
        # In the next window, once this window's count (then the previous one) weighs little enough.
        wait = (seconds - into) + (1 - (limit - 1) / current) * seconds
    return max(1, math.ceil(wait))
