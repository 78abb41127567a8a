"""One agent's own keep-alive HTTP/1.1 connection: what a watching agent sends its API calls on.

A node holds one connection to the server; so does each watching agent (docs/simulator.md, "Watching"). httpx,
which the rest of the simulator uses, spends about a millisecond of the simulator's CPU on each request
(building the request, its pool's bookkeeping, cookies, h11's state machine): with 10,000 agents on the
server's machine, each holding a request a minute and four more per upgrade, that CPU was taken from the
server being measured. This client does only what an agent's calls need, on a raw asyncio stream: a
request line, a few headers, a JSON body; a response with Content-Length, chunked, or read to the close.

It is no kinder to the server than httpx: the same requests, one connection per agent, kept alive at most
``keepalive_expiry`` seconds idle (then a new one, as a node whose connection a proxy dropped), never shared.
Errors are httpx's exception types, so callers handle both clients alike. Downloads stay on httpx
(simulator/downloads.py: ranges, redirects to storage, a paced reader).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx

MAX_HEAD_BYTES = 64 << 10


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
        self, method: str, url: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        """One exchange. A kept-alive connection that turns out closed before any byte of the answer came is
        replaced once (the request never reached the server's application); any other failure is raised."""
        request = self._encode(method, url, json, headers or {})
        for attempt in (1, 2):
            reused = self._writer is not None and time.monotonic() - self._idle_since < self.keepalive_expiry
            if not reused:
                self.close()
                await self._connect()
            started = time.perf_counter()
            try:
                assert self._writer is not None
                self._writer.write(request)
                async with asyncio.timeout(self.timeout):
                    status, head, content, keep = await self._read()
            except TimeoutError:
                self.close()
                raise httpx.ReadTimeout(f"no answer to {method} {url} in {self.timeout:g} s") from None
            except _ClosedBeforeAnswer:
                self.close()
                if reused and attempt == 1:
                    continue
                detail = f"the server closed the connection before answering {method} {url}"
                raise httpx.RemoteProtocolError(detail) from None
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise httpx.ReadError(f"{method} {url}: {type(exc).__name__}: {exc}") from None
            except BaseException:  # cancelled mid-exchange (a held request when the fleet stops): unusable now
                self.close()
                raise
            if keep:
                self._idle_since = time.monotonic()
            else:
                self.close()
            return Answer(status, head, content, timedelta(seconds=time.perf_counter() - started))
        raise AssertionError("unreachable")  # pragma: no cover

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

    async def _read(self) -> tuple[int, httpx.Headers, bytes, bool]:
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
        code = int(status)
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if code in (204, 304) or 100 <= code < 200:
            return code, headers, b"", keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return code, headers, await _read_chunked(reader), keep
        length = headers.get("content-length")
        if length is not None:
            return code, headers, await reader.readexactly(int(length)), keep
        return code, headers, await reader.read(), False  # delimited by the close


class _ClosedBeforeAnswer(Exception):
    """The connection ended before the first byte of an answer."""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
