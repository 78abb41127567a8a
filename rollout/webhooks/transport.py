"""Delivering one webhook POST (docs/webhooks.md), without Django: sign, check, pin, send, classify.

``post_event`` never raises and never takes longer than ``timeout`` once DNS has answered: the
Celery task that calls it records the ``DeliveryResult`` and schedules the next attempt with
``retry_delay``. It is built on httpcore (httpx's engine) rather than httpx.Client because
httpcore accepts a network backend: ours dials the address that ``resolve_checked`` approved
instead of resolving the name a second time, while the URL, the Host header, TLS SNI and
certificate verification all keep the original host name. No proxy from the environment is
used (a proxy would defeat the pin) and redirects are never followed (httpcore has none).

Retry schedule (``retry_delay(attempt)`` = wait after failed attempt number ``attempt``):
30 s, 1 min, 2 min, 4 min, 8 min, 16 min, 32 min, then 1 h for each further retry. With
``MAX_ATTEMPTS = 31`` (the first try and 30 retries) the retries span 24 h 3 min 30 s.
The schedule is deterministic (no jitter): deliveries are spread by their own creation times.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ssl
import time
import typing
from dataclasses import dataclass

import certifi
import httpcore

from rollout.webhooks.safety import (
    IPAddress,
    Target,
    UnsafeURL,
    address_allowed,
    addresses_checked,
    check_url,
    parse_url,
    resolve_checked,
)

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_RESPONSE_BYTES",
    "USER_AGENT",
    "DeliveryResult",
    "Fetched",
    "Target",
    "UnsafeURL",
    "address_allowed",
    "addresses_checked",
    "check_url",
    "exchange_pinned",
    "headers_for",
    "parse_url",
    "post_event",
    "post_pinned",
    "resolve_checked",
    "retry_delay",
    "sign",
    "verify",
]

USER_AGENT = "rollout-webhooks/1"
MAX_RESPONSE_BYTES = 64 * 1024
MAX_ERROR_LENGTH = 200
# Set by the transport from the checked target and the body, never by the caller.
_FRAMING_HEADERS = ("host", "content-length", "transfer-encoding")

FIRST_RETRY_SECONDS = 30
MAX_RETRY_SECONDS = 3600
MAX_ATTEMPTS = 31


@dataclass
class DeliveryResult:
    ok: bool
    status_code: int | None
    error: str | None


def sign(secret: str, body: bytes) -> str:
    """``X-Rollout-Signature``: ``sha256=`` and the lowercase hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str) -> bool:
    """What a receiver does with the signature (constant-time comparison); for docs, demo and tests."""
    return hmac.compare_digest(sign(secret, body), signature)


def headers_for(event: str, delivery_id: str, signature: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Rollout-Event": event,
        "X-Rollout-Delivery": delivery_id,
        "X-Rollout-Signature": signature,
        "User-Agent": USER_AGENT,
    }


def retry_delay(attempt: int) -> int:
    """Seconds to wait after failed attempt number ``attempt`` (1 = the first try) before the next."""
    step: int = min(max(attempt, 1) - 1, 20)  # bounded exponent: the cap is reached long before
    delay: int = FIRST_RETRY_SECONDS * (1 << step)
    return min(delay, MAX_RETRY_SECONDS)


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    # Built once: loading the CA bundle costs milliseconds; a context is safe to share across threads.
    return ssl.create_default_context(cafile=certifi.where())


class _DeadlineStream(httpcore.NetworkStream):
    """A stream whose every operation gets at most the time left before one overall deadline.

    httpcore's timeouts apply per socket operation, so a receiver trickling one byte at a time
    could hold a worker forever; the deadline makes ``timeout`` a bound on the whole exchange.
    """

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def _budget(self, timeout: float | None, exc: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise exc("deadline exceeded")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._budget(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._budget(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        budget = self._budget(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, budget), self._deadline)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses of one host, in order, instead of resolving its name."""

    def __init__(self, host: str, addresses: list[IPAddress], deadline: float) -> None:
        self._host = host
        self._addresses = addresses
        self._deadline = deadline
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        if host != self._host:  # only the delivery's own origin is ever dialled
            raise httpcore.ConnectError(f"unexpected host {host!r}")
        error: Exception = httpcore.ConnectError("no address")
        for ip in self._addresses:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout("deadline exceeded")
            try:
                stream = self._tcp.connect_tcp(
                    str(ip),
                    port,
                    timeout=left if timeout is None else min(timeout, left),
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:  # refused or unreachable: try the next address
                error = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise error

    def connect_unix_socket(self, *args: typing.Any, **kwargs: typing.Any) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not webhook receivers")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _short(prefix: str, exc: BaseException) -> str:
    detail = str(exc) or type(exc).__name__
    return f"{prefix}: {detail}"[:MAX_ERROR_LENGTH]


def _classify(exc: Exception) -> str:
    """A short, stable error text for the delivery log."""
    if isinstance(exc, httpcore.TimeoutException):
        return "timeout"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLError) or isinstance(exc, ssl.SSLError):
        return _short("tls", cause if isinstance(cause, ssl.SSLError) else exc)
    if isinstance(exc, httpcore.ConnectError):
        return _short("connect", exc)
    if isinstance(exc, httpcore.ProtocolError | httpcore.NetworkError):
        return _short("protocol", exc)
    return _short("error", exc)


@dataclass
class Fetched:
    """What a bounded exchange got: the status and at most ``max_bytes`` of the body, or an error."""

    status_code: int | None
    body: bytes
    truncated: bool
    error: str | None


def exchange_pinned(
    method: str,
    target: Target,
    addresses: list[IPAddress],
    headers: dict[str, str],
    *,
    body: bytes = b"",
    timeout: float,
    max_bytes: int,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """One request to ``target`` over a connection to one of ``addresses`` (already checked); never raises.

    Sends the target's own Host header and, for https, its SNI and verifies its certificate against
    that name. ``timeout`` bounds the whole exchange; at most ``max_bytes`` of the answer are read
    (``truncated`` says there was more). Used by the webhooks' POST and the gates' GET.
    """
    deadline = time.monotonic() + timeout
    request_headers = [(k, v) for k, v in headers.items() if k.lower() not in _FRAMING_HEADERS]
    request_headers.insert(0, ("Host", target.host_header))
    url = httpcore.URL(scheme=target.scheme, host=target.host, port=target.port, target=target.target)
    pool = httpcore.ConnectionPool(
        ssl_context=ssl_context or _default_ssl_context(),
        network_backend=_PinnedBackend(target.host, addresses, deadline),
        max_connections=1,
        retries=0,
    )
    received = bytearray()
    truncated = False
    try:
        with pool:
            extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
            content = body if method != "GET" else None
            with pool.stream(method, url, headers=request_headers, content=content, extensions=extensions) as response:
                status = response.status
                try:
                    for chunk in response.iter_stream():
                        received += chunk
                        if len(received) > max_bytes:
                            truncated = True
                            break
                except Exception as exc:  # the status is known; the caller judges a body cut short
                    return Fetched(status_code=status, body=bytes(received), truncated=True, error=_classify(exc))
    except Exception as exc:
        return Fetched(status_code=None, body=b"", truncated=False, error=_classify(exc))
    return Fetched(status_code=status, body=bytes(received[:max_bytes]), truncated=truncated, error=None)


def post_pinned(
    target: Target,
    addresses: list[IPAddress],
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> DeliveryResult:
    """POST ``body`` to ``target`` over a connection to one of ``addresses`` (already checked); never raises.

    A little of the answer is read and discarded: the status already says whether it was delivered.
    """
    fetched = exchange_pinned(
        "POST",
        target,
        addresses,
        headers,
        body=body,
        timeout=timeout,
        max_bytes=MAX_RESPONSE_BYTES,
        ssl_context=ssl_context,
    )
    status = fetched.status_code
    if status is None:
        return DeliveryResult(ok=False, status_code=None, error=fetched.error)
    if 200 <= status < 300:
        return DeliveryResult(ok=True, status_code=status, error=None)
    return DeliveryResult(ok=False, status_code=status, error=f"HTTP {status}")


def post_event(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allow_http: bool,
    timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> DeliveryResult:
    """Deliver one webhook POST; never raises. ``ok`` only for a 2xx answer.

    ``allow_http`` is ``ROLLOUT_WEBHOOKS_ALLOW_HTTP=1``: it admits http:// and private/loopback
    addresses. ``ssl_context`` replaces the certifi trust store (tests, private CAs).
    """
    try:
        target = parse_url(url, allow_http=allow_http)
        addresses = resolve_checked(target.host, target.port, allow_private=allow_http)
    except UnsafeURL as exc:
        return DeliveryResult(ok=False, status_code=None, error=_short(UnsafeURL.code, exc))
    except Exception as exc:  # never raise, whatever the input
        return DeliveryResult(ok=False, status_code=None, error=_short("error", exc))
    return post_pinned(target, addresses, body, headers, timeout=timeout, ssl_context=ssl_context)
