"""How simulated agents get a binary: each its own bytes, or one fetch per binary (docs/simulator.md#downloads).

``AgentDownloads`` (the default) is what a fleet of real nodes does to the server: every agent
downloads the whole binary itself, on its own connection (never the heartbeats' pool, so a download
does not delay a beat), at most ``rate`` bytes/s (``--download-rate``: a slow link, paced as TCP
paces it: the agent reads no faster). The bytes are hashed as they arrive and dropped: an agent
holds the sha256 state, a count and the validator, never the binary, so 50 agents fetching a
32 MiB file do not hold 50 copies. A download cut short resumes from the byte it stopped at, with
``Range: bytes=<received>-`` and ``If-Range: <the ETag it started with>``; a 206 that does not
start there or carries another ETag, or a 200, means the bytes changed (or the server ignored
If-Range): the agent starts over. A download that still fails is retried at the next beat, from
where it stopped.

``SharedDownloads`` (``--shared-downloads``) keeps the old shortcut for control-plane benchmarks:
one fetch per (url, sha256) for the whole fleet, its digest handed to every agent that asks.

Both answer the agent's one question: the digest and size of the bytes at ``url`` (``Fetched``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx

from simulator.connection import AgentConnection
from simulator.stats import FleetStats

#: Downloads of one binary whose bytes are not the spec's before the agent reports ``download_failed``.
DOWNLOAD_ATTEMPTS = 3
#: The first pause between them (seconds), doubled each time, jittered.
DOWNLOAD_BACKOFF = 0.5
CHUNK = 64 << 10  # what one read of the socket brings at most (httpcore): the most a cut may cost twice
MIN_WINDOW = 64 << 10


def downloads_client(
    rate: float | None,
    *,
    limits: httpx.Limits | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """A client that downloads over links of ``rate`` bytes/s: by default the polling agents' downloads client, as
    many connections as downloads, none shared with the heartbeats; with ``limits``, a watching agent's download.

    With a rate, each connection's receive buffer is what such a link holds in a tenth of a second
    (at least 64 KiB): the server then sees a slow reader from the first byte, as it would across a
    slow link, instead of filling megabytes of loopback buffers at once.
    """
    options = []
    if rate is not None:
        options.append((socket.SOL_SOCKET, socket.SO_RCVBUF, max(MIN_WINDOW, int(rate / 10))))
    transport = httpx.AsyncHTTPTransport(
        socket_options=options, limits=limits or httpx.Limits(max_connections=None), verify=verify
    )
    return httpx.AsyncClient(transport=transport, http1=True)


@dataclass(frozen=True)
class Fetched:
    """The bytes an agent received, as it verifies them: their sha256 (hex) and size."""

    sha256: str
    size: int


class Downloads(Protocol):
    async def fetch(self, url: str, sha256: str, *, holder: Any) -> Fetched: ...


class StreamingClient(Protocol):
    """What a download is streamed over: ``httpx.AsyncClient``, or an agent's own connection (``OnConnection``)."""

    def stream(
        self, method: str, url: str, *, headers: dict[str, str], timeout: httpx.Timeout, follow_redirects: bool
    ) -> AbstractAsyncContextManager[httpx.Response]: ...


class OnConnection:
    """A watching agent's download on its own connection to the server (simulator/connection.py), as a node's
    HTTP client reuses its keep-alive connection; a redirect elsewhere (``redirect`` mode: the store's presigned
    URL) is followed on a client from ``elsewhere``, as httpx follows it."""

    def __init__(self, connection: AgentConnection, elsewhere: Callable[[], httpx.AsyncClient]) -> None:
        self.connection = connection
        self.elsewhere = elsewhere

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, headers: dict[str, str], timeout: httpx.Timeout, follow_redirects: bool
    ) -> AsyncIterator[httpx.Response]:
        target = None
        async with self.connection.stream(method, url, headers=headers, timeout=timeout.read) as response:
            if follow_redirects and response.is_redirect:
                await response.aread()  # its small body: the connection stays usable
                target = urljoin(url, response.headers["location"])
            else:
                yield response
        if target is not None:
            async with (
                self.elsewhere() as client,
                client.stream(method, target, headers=headers, timeout=timeout, follow_redirects=True) as redirected,
            ):
                yield redirected


@dataclass
class _Progress:
    """A download so far: enough to resume it, nothing of the bytes themselves."""

    digest: Any = field(default_factory=hashlib.sha256)
    received: int = 0
    etag: str | None = None

    def restart(self, etag: str | None) -> None:
        self.digest, self.received, self.etag = hashlib.sha256(), 0, etag


class _StartOver(Exception):
    """The server's answer does not continue what was received: fetch it all again."""


def _range_start(content_range: str | None) -> int | None:
    """``bytes <first>-<last>/<size>`` -> first."""
    try:
        unit, _, span = (content_range or "").partition(" ")
        return int(span.split("-", 1)[0]) if unit.lower() == "bytes" else None
    except ValueError:
        return None


class AgentDownloads:
    """Per-agent downloads at ``rate`` bytes/s each (None: as fast as the link), resumed after a cut."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        stats: FleetStats,
        *,
        rate: float | None = None,
        timeout: float = 30.0,
        attempts: int = 4,
        retry_delay: float = 0.2,
    ):
        if rate is not None and rate <= 0:
            raise ValueError("the download rate is a positive number of bytes per second")
        self._client = client
        self._stats = stats
        self._rate = rate
        self._timeout = timeout
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._progress: dict[tuple[Any, str, str], _Progress] = {}  # interrupted downloads, kept between beats

    async def fetch(self, url: str, sha256: str, *, holder: Any, client: StreamingClient | None = None) -> Fetched:
        """The whole binary at ``url``, for ``holder`` (an agent), over ``client`` (the holder's own; by default
        the downloads client); raises httpx.HTTPError when it cannot get it now."""
        key = (holder, url, sha256.lower())
        progress = self._progress.setdefault(key, _Progress())
        started = time.monotonic()
        try:
            for attempt in range(self._attempts):
                try:
                    await self._attempt(url, progress, client or self._client)
                    break
                except _StartOver:
                    progress.restart(None)
                except httpx.TransportError:
                    if attempt + 1 == self._attempts:
                        raise  # kept in self._progress: the next beat resumes from there
                await asyncio.sleep(self._retry_delay)
            else:
                raise httpx.RemoteProtocolError(f"{url}: no complete answer in {self._attempts} attempts")
        finally:
            self._stats.download_seconds += time.monotonic() - started
        del self._progress[key]
        self._stats.downloads += 1
        return Fetched(sha256=progress.digest.hexdigest(), size=progress.received)

    async def _attempt(self, url: str, progress: _Progress, client: StreamingClient) -> None:
        validator = progress.etag
        resuming = progress.received > 0 and validator is not None
        headers = {"Range": f"bytes={progress.received}-", "If-Range": validator} if validator and resuming else {}
        timeout = httpx.Timeout(self._timeout, connect=min(5.0, self._timeout))
        async with client.stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
            if response.status_code == 206 and resuming:
                same = response.headers.get("etag") == validator
                if not same or _range_start(response.headers.get("content-range")) != progress.received:
                    raise _StartOver
                self._stats.download_resumes += 1
            elif response.status_code == 416 and resuming:
                raise _StartOver  # shorter than what was received: not the bytes it started with
            elif response.status_code == 200:
                progress.restart(response.headers.get("etag"))
            else:
                response.raise_for_status()
                detail = f"{response.status_code} to a request without Range"
                raise httpx.HTTPStatusError(detail, request=response.request, response=response)
            await self._read(response, progress)

    async def _read(self, response: httpx.Response, progress: _Progress) -> None:
        """Hash the body as it arrives, no faster than the rate allows."""
        began, got = time.monotonic(), 0
        async for chunk in response.aiter_bytes():  # as it arrives: a cut loses nothing received
            progress.digest.update(chunk)
            progress.received += len(chunk)
            got += len(chunk)
            self._stats.download_bytes += len(chunk)
            if self._rate is not None:
                ahead = got / self._rate - (time.monotonic() - began)
                if ahead > 0:
                    await asyncio.sleep(ahead)


class Corrupt(Exception):
    """The bytes received were not the expected ones in DOWNLOAD_ATTEMPTS downloads."""


async def fetch_expected(fetch: Callable[[], Awaitable[Fetched]], expected: str, rng: random.Random) -> Fetched:
    """``fetch()`` until its bytes hash to ``expected`` (the spec's sha256: what the server meant to send), at most
    DOWNLOAD_ATTEMPTS times with backoff, else ``Corrupt`` (the agent reports ``download_failed``). Bytes that are
    the spec's but not the signed manifest's are the trust check's to refuse (``digest_mismatch``)."""
    for attempt in range(DOWNLOAD_ATTEMPTS):
        fetched = await fetch()
        if fetched.sha256 == expected.lower():
            return fetched
        if attempt + 1 < DOWNLOAD_ATTEMPTS:
            await asyncio.sleep(DOWNLOAD_BACKOFF * 2**attempt * rng.uniform(0.5, 1.5))
    raise Corrupt(f"the bytes do not match sha256 {expected} after {DOWNLOAD_ATTEMPTS} attempts")


class SharedDownloads:
    """One fetch per (url, sha256) for the whole fleet; concurrent askers share the one in flight.

    Only the digest is kept (at most ``max_entries`` of them): it saves the server's bandwidth, for
    benchmarks of the control plane; it is not what a fleet does to a server.
    """

    def __init__(self, fetcher: AgentDownloads, stats: FleetStats, *, max_entries: int = 16):
        self._fetcher = fetcher
        self._stats = stats
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Fetched] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[Fetched]] = {}

    async def fetch(self, url: str, sha256: str, *, holder: Any = None) -> Fetched:
        key = (url, sha256.lower())
        if key in self._entries:
            self._entries.move_to_end(key)
            self._stats.download_cache_hits += 1
            return self._entries[key]
        inflight = self._inflight.get(key)
        if inflight is not None:
            self._stats.download_cache_hits += 1
            return await asyncio.shield(inflight)
        future: asyncio.Future[Fetched] = asyncio.get_running_loop().create_future()
        # Nobody may be waiting on a failed fetch: mark its exception as retrieved.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._inflight[key] = future
        try:
            fetched = await self._fetcher.fetch(url, sha256, holder="shared")
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            self._inflight.pop(key, None)
        self._entries[key] = fetched
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        future.set_result(fetched)
        return fetched
