"""Request limits per credential (docs/operations.md#request-limits): every request under /api/compute/ that
carries a Bearer credential is counted against that credential, across every web process, before any view
runs (the plain-heartbeat path and held requests included, each counted once, when it arrives):

- an agent token (the agent endpoints, /api/compute/agent/...): ``AGENT_TOKEN_RATE``, by default 5 requests
  per ``heartbeatSeconds`` averaged over a minute (30 per minute at 10 s);
- an API key (every other endpoint): ``API_KEY_RATE``, by default 1200 per minute.

Binary downloads are never counted. A request over its credential's limit is answered 429 ``throttled``
with ``Retry-After``, and counted in ``api_requests_throttled_total{credential}``. The credential is
counted by the hash of what is presented, before it is checked: a flood with a wrong token is limited
too, and costs no database query once over the limit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import Counter

from core.ratelimit import Rate, RedisCountStore, SlidingWindowLimiter, parse_rate
from fleet.services.nodes import heartbeat_seconds
from fleet.tokens import bearer_token, token_hash

API_PREFIX = "/api/compute/"
AGENT_PREFIX = "/api/compute/agent/"
DOWNLOADS_PREFIX = "/api/compute/downloads/"  # binaries: never counted (rollout's downloads endpoint)
API_KEY, AGENT_TOKEN = "api_key", "agent_token"
# Set in the ASGI scope by the async agent-session front (fleet/watch/front.py) on a request it counted before
# handing it to Django: Django's middleware does not count it twice. A client cannot set it (not a header).
COUNTED_SCOPE_KEY = "rollout.request_counted"

THROTTLED = Counter(
    "api_requests_throttled",
    "Requests answered 429 throttled: over their credential's limit (API_KEY_RATE, AGENT_TOKEN_RATE).",
    ["credential"],
)


def api_key_rate() -> Rate:
    return _rate(settings.API_KEY_RATE, None)


def agent_token_rate() -> Rate:
    return _rate(settings.AGENT_TOKEN_RATE, heartbeat_seconds())


@functools.lru_cache(maxsize=8)
def _rate(text: str, heartbeat_seconds: int | None) -> Rate:
    # A malformed value is a system check error (fleet.E001, fleet.E002): the server does not start with it.
    return parse_rate(text, heartbeat_seconds=heartbeat_seconds)


@functools.lru_cache(maxsize=4)
def _limiter(store_url: str) -> SlidingWindowLimiter:
    return SlidingWindowLimiter(RedisCountStore(store_url) if store_url else None)


def limiter() -> SlidingWindowLimiter:
    """The process's limiter, on the shared store ``CACHE_URL`` (per process without one)."""
    return _limiter(settings.CACHE_URL or "")


@dataclass(frozen=True)
class Throttled:
    """A request over its credential's limit: what it is told (429 ``throttled``)."""

    wait: int  # whole seconds: Retry-After
    rate: Rate
    credential: str

    def body(self) -> dict[str, object]:
        what = "agent token" if self.credential == AGENT_TOKEN else "API key"
        return {
            "code": "throttled",
            "detail": f"Too many requests with this {what}: at most {self.rate}. Retry in {self.wait} s.",
            "retryAfter": self.wait,
        }


def request_throttled(*, path: str, authorization: str | None) -> Throttled | None:
    """Count a request to ``path`` against its Bearer credential; how it is refused when over the limit, else None.

    The one place requests are counted: the middleware (every Django view) and the async agent-session front
    (fleet/watch/front.py) both ask it, once per request, when it arrives.
    """
    if not path.startswith(API_PREFIX) or path.startswith(DOWNLOADS_PREFIX):
        return None
    token = bearer_token(authorization)
    if token is None:
        return None
    credential = AGENT_TOKEN if path.startswith(AGENT_PREFIX) else API_KEY
    rate = agent_token_rate() if credential == AGENT_TOKEN else api_key_rate()
    wait = limiter().hit(credential, token_hash(token), rate)
    if wait is None:
        return None
    THROTTLED.labels(credential=credential).inc()
    return Throttled(wait=wait, rate=rate, credential=credential)


class RequestLimitMiddleware:
    """Counts each API request against its Bearer credential; 429 past the credential's limit."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.META.get("asgi.scope", {}).get(COUNTED_SCOPE_KEY):
            return self.get_response(request)
        throttled = request_throttled(path=request.path_info, authorization=request.META.get("HTTP_AUTHORIZATION"))
        if throttled is not None:
            response = JsonResponse(throttled.body(), status=429)
            response["Retry-After"] = str(throttled.wait)
            return response
        return self.get_response(request)
