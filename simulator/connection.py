"""One agent's own keep-alive HTTP/1.1 connection: what a watching agent sends its API calls on.

A node holds one connection to the server; so does each watching agent (docs/simulator.md, "Watching"). httpx,
which the rest of the simulator uses, spends about a millisecond of the simulator's CPU on each request
(building the request, its pool's bookkeeping, cookies, h11's state machine): with 10,000 agents on the
server's machine, each holding a request a minute and four more per upgrade, that CPU was taken from the
server being measured. This client does only what an agent's calls need, on a raw asyncio stream: a
request line, a few headers, a JSON body; a response with Content-Length, chunked, or read to the close.

It is no kinder to the server than httpx: the same requests, one connection per agent, kept alive at most
``keepalive_expiry`` seconds idle (then a new one, as a node whose connection a proxy dropped), never shared.
Errors are httpx's exception types, so callers handle both clients alike. A download from the server goes on
the same connection (``stream``: its body read as it arrives, never held whole), as a node's HTTP client
reuses its keep-alive connection; one paced at a link's rate, or redirected to storage, takes httpx
(simulator/downloads.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx

MAX_HEAD_BYTES = 64 << 10
CHUNK = 64 << 10  # the most one read of a streamed body asks for


@dataclass
class Answer:
    """A response, read whole: what callers of ``Fleet.request`` use of ``httpx.Response``."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    elapsed: timedelta = field(default_factory=timedelta)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class AgentConnection:
    """A keep-alive connection to ``base_url`` for one agent's calls, one at a time."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        connect_timeout: float,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.host_header = parts.netloc.encode()
        self.ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.keepalive_expiry = keepalive_expiry
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._idle_since = 0.0

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        replace_closed: bool = True,
    ) -> Answer:
        """One exchange, its answer read whole. ``replace_closed=False``: a kept-alive connection found closed is
        not replaced here (the caller retries, as for a held request: docs/fleet.md#retries)."""
        started = time.perf_counter()
        request = self._encode(method, url, json, headers or {})
        status, head, keep = await self._send(request, method, url, replace_closed=replace_closed)
        try:
            assert self._reader is not None
            async with asyncio.timeout(self.timeout):
                content, keep = await _read_body(self._reader, status, head, keep)
        except BaseException as exc:
            self.close()
            raise _as_httpx(exc, method, url, self.timeout) from None
        self._done(keep)
        return Answer(status, head, content, timedelta(seconds=time.perf_counter() - started))

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, headers: dict[str, str] | None = None, timeout: float | None = None
    ) -> AsyncIterator[httpx.Response]:
        """One exchange whose body is read as it arrives (a download): an ``httpx.Response`` to iterate, each read
        within ``timeout`` seconds. The connection is kept only when the body was read to its end."""
        timeout = self.timeout if timeout is None else timeout
        status, head, keep = await self._send(self._encode(method, url, None, headers or {}), method, url, timeout)
        try:
            body = _StreamedBody(self, status, head, keep, timeout, (method, url))
        except ValueError as exc:  # a Content-Length that is no length: the connection cannot be reused
            self.close()
            raise _as_httpx(exc, method, url, timeout) from None
        try:
            yield httpx.Response(status, headers=head, stream=body, request=httpx.Request(method, url))
        finally:
            if body.complete:
                self._done(body.keep)
            else:
                self.close()

    async def _send(
        self, request: bytes, method: str, url: str, timeout: float | None = None, *, replace_closed: bool = True
    ) -> tuple[int, httpx.Headers, bool]:
        """Write ``request`` and read the answer's head. A kept-alive connection that turns out closed before any
        byte of the answer came is replaced once (the request never reached the server's application), unless
        ``replace_closed`` is False; any other failure is raised, as httpx's exception."""
        timeout = self.timeout if timeout is None else timeout
        for attempt in (1, 2):
            reused = self._writer is not None and time.monotonic() - self._idle_since < self.keepalive_expiry
            if not reused:
                self.close()
                await self._connect()
            try:
                assert self._writer is not None
                self._writer.write(request)
                async with asyncio.timeout(timeout):
                    return await self._read_head()
            except _ClosedBeforeAnswer:
                self.close()
                if reused and attempt == 1 and replace_closed:
                    continue
                detail = f"the server closed the connection before answering {method} {url}"
                raise httpx.RemoteProtocolError(detail) from None
            except BaseException as exc:  # cancelled mid-exchange too (a held request when the fleet stops)
                self.close()
                raise _as_httpx(exc, method, url, timeout) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _done(self, keep: bool) -> None:
        if keep:
            self._idle_since = time.monotonic()
        else:
            self.close()

    def reaches(self, url: str) -> bool:
        """Whether ``url`` is on this connection's server."""
        return url.startswith(self.origin + "/")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self) -> None:
        self.close()

    # -- the wire ------------------------------------------------------------------------------

    def _encode(self, method: str, url: str, body: Any, headers: dict[str, str]) -> bytes:
        if url.startswith(self.origin):
            target = url[len(self.origin) :] or "/"
        elif url.startswith("/"):
            target = url
        else:
            raise httpx.UnsupportedProtocol(f"{url} is not on {self.origin}: this connection only reaches its server")
        lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + self.host_header, b"Accept: */*"]
        lines.extend(f"{name}: {value}".encode() for name, value in headers.items())
        payload = b""
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            lines.append(b"Content-Type: application/json")
        if payload or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: " + str(len(payload)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n" + payload

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(self.connect_timeout):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, limit=MAX_HEAD_BYTES
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {self.origin} in {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{self.origin}: {exc}") from None

    async def _read_head(self) -> tuple[int, httpx.Headers, bool]:
        reader = self._reader
        assert reader is not None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _ClosedBeforeAnswer from None
            raise
        except ConnectionResetError:
            raise _ClosedBeforeAnswer from None
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        version, status, *_ = status_line.split(" ", 2)
        pairs = [line.split(":", 1) for line in header_lines]
        headers = httpx.Headers([(name.strip(), value.strip()) for name, value in pairs])
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return int(status), headers, keep


class _ClosedBeforeAnswer(Exception):
    """The connection ended before the first byte of an answer."""


def _as_httpx(exc: BaseException, method: str, url: str, timeout: float) -> BaseException:
    """What an exchange's failure is raised as: httpx's exception for a timeout or a broken connection."""
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(f"no answer to {method} {url} in {timeout:g} s")
    if isinstance(exc, OSError | asyncio.IncompleteReadError | asyncio.LimitOverrunError | ValueError):
        return httpx.ReadError(f"{method} {url}: {type(exc).__name__}: {exc}")
    return exc


def _framing(status: int, head: httpx.Headers) -> tuple[str, int]:
    """How a body ends: ("none" | "chunked" | "length" | "close", its length when "length")."""
    if status in (204, 304) or 100 <= status < 200:
        return "none", 0
    if "chunked" in head.get("transfer-encoding", "").lower():
        return "chunked", 0
    length = head.get("content-length")
    if length is None:
        return "close", 0
    if not length.isdigit():
        raise ValueError(f"Content-Length {length!r} is not a length")
    return "length", int(length)


async def _read_body(reader: asyncio.StreamReader, status: int, head: httpx.Headers, keep: bool) -> tuple[bytes, bool]:
    framing, length = _framing(status, head)
    if framing == "none":
        return b"", keep
    if framing == "chunked":
        return b"".join([chunk async for chunk in _chunks(reader)]), keep
    if framing == "length":
        return await reader.readexactly(length), keep
    return await reader.read(), False  # delimited by the close


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's chunks, then its trailers and the blank line read."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the blank line
                pass
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


class _StreamedBody(httpx.AsyncByteStream):
    """A streamed answer's body, read from the connection as the caller iterates, each read within ``timeout``."""

    def __init__(
        self,
        connection: AgentConnection,
        status: int,
        head: httpx.Headers,
        keep: bool,
        timeout: float,
        exchange: tuple[str, str],
    ) -> None:
        self.connection, self.timeout, self.exchange = connection, timeout, exchange
        self.framing, self.left = _framing(status, head)
        self.keep = keep and self.framing != "close"
        self.complete = self.framing == "none"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reader = self.connection._reader
        if self.complete or reader is None:
            return
        parts = _chunks(reader) if self.framing == "chunked" else None
        try:
            while True:
                async with asyncio.timeout(self.timeout):
                    if parts is not None:
                        chunk = await anext(parts, b"")
                    elif self.framing == "length":
                        chunk = await reader.read(min(CHUNK, self.left)) if self.left else b""
                        if not chunk and self.left:
                            raise asyncio.IncompleteReadError(b"", self.left)
                        self.left -= len(chunk)
                    else:
                        chunk = await reader.read(CHUNK)
                if not chunk:
                    self.complete = True
                    return
                yield chunk
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            method, url = self.exchange
            if isinstance(exc, asyncio.IncompleteReadError):
                detail = f"{method} {url}: the connection closed before the body's end"
                raise httpx.RemoteProtocolError(detail) from None
            raise _as_httpx(exc, method, url, self.timeout) from None
