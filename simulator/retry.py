"""How a simulated agent retries a call that failed: the agent protocol's rule (docs/fleet.md#retries), which a
good real agent follows, so that a benchmark's fleet rejoining at once behaves like a good real fleet.

- An answer with ``Retry-After`` (429 ``throttled``; 503 ``overloaded``, ``unavailable`` or
  ``database_unavailable``): the same request again after ``Retry-After`` plus a random fraction of a second
  (``Fleet.request``).
- A held request (one with ``wait``) cut without an answer, its connection closed or reset: again at once, once
  (``Fleet.request``); a second failure backs off.
- Any other failure: the next beat after ``backoff``: uniform(0, min(interval, 1 s x 2^(failures - 1))).

``retry="fixed"`` is the simulator's behaviour before the rule, kept to measure against (``benchmarks/reconnect.py``):
a failed beat waits its whole interval, ``Retry-After`` is waited out to the second, a cut request is not retried.
"""

from __future__ import annotations

import contextlib
import email.utils
import random
import time

import httpx

BACKOFF = "backoff"
FIXED = "fixed"
RETRIES = (BACKOFF, FIXED)
#: The first backoff window, in seconds; each failure in a row doubles it, up to the interval.
BACKOFF_BASE = 1.0


def backoff(failures: int, *, cap: float, rng: random.Random) -> float:
    """Seconds before trying again after ``failures`` failures in a row: exponential backoff with full jitter."""
    window = min(cap, BACKOFF_BASE * 2 ** min(max(failures, 1) - 1, 30))
    return rng.uniform(0, window)


def told_to_wait(response: httpx.Response | object, *, rng: random.Random | None) -> float | None:
    """The seconds to wait before the same request again when an answer asks for it: a 429 (1 s without
    ``Retry-After``) or a 503 with ``Retry-After``, plus a random fraction of a second drawn from ``rng`` (None:
    none, ``retry="fixed"``); None for any other answer."""
    status = getattr(response, "status_code", None)
    value = getattr(response, "headers", {}).get("Retry-After")
    if status == 429 or (status == 503 and value is not None):
        return retry_after(value) + (rng.random() if rng is not None else 0.0)
    return None


def cut(exc: BaseException) -> bool:
    """Whether a request's failure is its connection closed or reset before an answer (not a timeout, not a
    refused connection)."""
    return isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError)


def retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date); 1 s when it is missing."""
    if value:
        with contextlib.suppress(ValueError):
            return max(0.0, float(value))
        with contextlib.suppress(TypeError, ValueError, IndexError):
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return 1.0
