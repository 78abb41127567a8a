"""A watching agent's own connection (simulator/connection.py) against a real socket server: one keep-alive
connection for its calls, every way an HTTP/1.1 answer may be framed, and httpx's errors when it fails."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest

from simulator import AgentDownloads, FleetStats
from simulator.connection import AgentConnection
from simulator.downloads import OnConnection
from tests.simulator.conftest import sha256

Handler = Callable[[bytes, bytes], Awaitable[bytes | None]]  # (request head, body) -> raw answer; None: close


class Server:
    """An HTTP/1.1 server that answers each request with what ``handler`` writes, counting its connections."""

    def __init__(self, handler: Handler, *, close_after_each: bool = False) -> None:
        self.handler = handler
        self.close_after_each = close_after_each
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None
        self.closed = asyncio.Event()  # set once the server has closed a connection (its socket shut)

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-l")),
                    0,
                )
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                answer = await self.handler(head, body)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after_each or b"\r\nConnection: close\r\n" in answer:
                    break  # as a server that drops idle keep-alive connections, or said it would close
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed.set()


def run(scenario: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """A test that runs ``scenario`` on a loop of its own (the suite has no asyncio plug-in)."""

    @functools.wraps(scenario)
    def test(*args, **kwargs) -> None:
        asyncio.run(scenario(*args, **kwargs))

    return test


def answer(status: str = "200 OK", body: bytes = b"", *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def connection(url: str, **options) -> AgentConnection:
    return AgentConnection(url, timeout=options.pop("timeout", 5), connect_timeout=2, **options)


@run
async def test_calls_share_one_kept_alive_connection_and_send_what_the_agent_asked():
    async def echo(head: bytes, body: bytes) -> bytes:
        return answer("200 OK", json.dumps({"got": json.loads(body or b"null")}).encode(), "Content-Type: x")

    async with Server(echo) as server:
        agent = connection(server.url)
        first = await agent.request("POST", "/api/x", json={"a": 1}, headers={"Authorization": "Bearer t"})
        second = await agent.request("DELETE", server.url + "/api/x?y=1")
        agent.close()
    assert (first.status_code, first.json(), first.is_success) == (200, {"got": {"a": 1}}, True)
    assert second.json() == {"got": None}
    assert first.headers.get("content-type") == first.headers.get("Content-Type") == "x"
    assert server.connections == 1
    (head, body), (delete_head, _) = server.requests
    assert head.startswith(b"POST /api/x HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer t\r\n" in head
    assert b"\r\nContent-Type: application/json\r\n" in head
    assert json.loads(body) == {"a": 1}
    assert delete_head.startswith(b"DELETE /api/x?y=1 HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("raw", "content"),
    [
        (
            answer("200 OK", b"", "Transfer-Encoding: chunked") + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            b"hello world",
        ),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", b"to the end"),
        (answer("204 No Content", b"", "Content-Length: 0"), b""),
        (answer("429 Too Many Requests", b"{}", "Retry-After: 7"), b"{}"),
    ],
)
@run
async def test_every_framing_of_an_answer_is_read_whole(raw: bytes, content: bytes):
    async def fixed(head: bytes, body: bytes) -> bytes | None:
        return raw

    async with Server(fixed) as server:
        agent = connection(server.url)
        first = await agent.request("GET", "/")
        second = await agent.request("GET", "/")  # the connection is still usable, or was replaced (close)
        agent.close()
    assert first.content == second.content == content
    assert first.text == content.decode()
    if first.status_code == 429:
        assert first.headers.get("Retry-After") == "7"
        assert not first.is_success


@run
async def test_a_connection_the_server_closed_while_idle_is_replaced_once_unnoticed():
    async def ok(head: bytes, body: bytes) -> bytes:
        return answer("200 OK", b"ok")

    async with Server(ok, close_after_each=True) as server:
        agent = connection(server.url)
        assert (await agent.request("GET", "/")).content == b"ok"
        await asyncio.wait_for(server.closed.wait(), timeout=5)  # the server has closed it
        assert (await agent.request("POST", "/", json={})).content == b"ok"
        agent.close()
    assert server.connections == 2
    assert len(server.requests) == 2  # the second request reached the server once


@run
async def test_failures_are_httpx_errors():
    async def silent(head: bytes, body: bytes) -> bytes | None:
        await asyncio.sleep(10)
        return None

    async with Server(silent) as server:
        agent = connection(server.url, timeout=0.3)
        with pytest.raises(httpx.ReadTimeout):
            await agent.request("GET", "/")
        with pytest.raises(httpx.UnsupportedProtocol):
            await agent.request("GET", "http://elsewhere.invalid/")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await connection(f"http://127.0.0.1:{port}").request("GET", "/")


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (answer("200 OK", b"x" * 200_000, 'ETag: "v1"'), True),
        (answer("200 OK", b"", "Transfer-Encoding: chunked") + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"y" * 100_000, False),
    ],
    ids=["content-length", "chunked", "to-the-close"],
)
@run
async def test_a_download_streams_on_the_agents_own_connection(raw: bytes, kept: bool):
    """``stream``: the body arrives in reads (never whole), and the connection is kept after a body read to its end."""
    expected = raw.split(b"\r\n\r\n", 1)[1]
    if b"chunked" in raw:
        expected = b"hello world"

    async def download(head: bytes, body: bytes) -> bytes:
        return raw if head.startswith(b"GET /bin") else answer("200 OK", b"{}")

    async with Server(download) as server:
        agent = connection(server.url)
        await agent.request("POST", "/api/session", json={})
        async with agent.stream("GET", server.url + "/bin", headers={"Range": "bytes=0-"}) as response:
            reads = [chunk async for chunk in response.aiter_bytes()]
        await agent.request("POST", "/api/session", json={})
        agent.close()
    assert b"".join(reads) == expected
    assert response.status_code == 200
    assert len(reads) > 1  # read as it came, never whole
    assert all(len(chunk) <= 64 << 10 for chunk in reads)
    assert server.connections == (1 if kept else 2)
    assert b"\r\nRange: bytes=0-\r\n" in server.requests[1][0]


@run
async def test_a_download_cut_short_is_an_httpx_error_and_the_next_call_connects_again():
    async def cut(head: bytes, body: bytes) -> bytes | None:
        if head.startswith(b"GET"):
            return answer("200 OK", b"", "Content-Length: 1000", "Connection: close") + b"z" * 300
        return answer("200 OK", b"{}")

    async with Server(cut) as server:
        agent = connection(server.url)
        received: list[bytes] = []

        async def download() -> None:
            async with agent.stream("GET", "/bin") as response:
                async for chunk in response.aiter_bytes():
                    received.append(chunk)

        with pytest.raises(httpx.RemoteProtocolError):
            await download()
        assert b"".join(received) == b"z" * 300  # what came before the cut is the caller's (a resume starts there)
        assert (await agent.request("POST", "/api/session", json={})).json() == {}
        agent.close()
    assert server.connections == 2


@run
async def test_a_download_whose_length_is_no_length_is_an_httpx_error_and_the_connection_is_not_reused():
    async def bad(head: bytes, body: bytes) -> bytes:
        if head.startswith(b"GET"):
            return answer("200 OK", b"", "Content-Length: -5") + b"junk"
        return answer("200 OK", b"{}")

    async with Server(bad) as server:
        agent = connection(server.url)

        async def download() -> None:
            async with agent.stream("GET", "/bin"):
                pass

        with pytest.raises(httpx.ReadError, match="not a length"):
            await download()
        assert (await agent.request("POST", "/api/session", json={})).json() == {}  # not the junk
        agent.close()
    assert server.connections == 2


@run
async def test_a_watching_agents_download_resumes_on_its_connection_and_follows_a_redirect_elsewhere():
    """``OnConnection`` under ``AgentDownloads``: a cut download resumes with Range and If-Range on the agent's own
    connection; a redirect (``redirect`` mode: storage) is followed on a client of its own."""
    data = bytes(range(256)) * 400

    async def origin(head: bytes, body: bytes) -> bytes:
        if head.startswith(b"GET /moved"):
            return answer("302 Found", b"", f"Location: {store.url}/object")
        if b"\r\nRange: bytes=" in head:
            start = int(head.split(b"\r\nRange: bytes=")[1].split(b"-")[0])
            assert b'\r\nIf-Range: "v1"\r\n' in head
            span = f"Content-Range: bytes {start}-{len(data) - 1}/{len(data)}"
            return answer("206 Partial Content", data[start:], 'ETag: "v1"', span)
        return answer("200 OK", b"", 'ETag: "v1"', f"Content-Length: {len(data)}", "Connection: close") + data[:40_000]

    async def storage(head: bytes, body: bytes) -> bytes:
        return answer("200 OK", data, 'ETag: "s3"')

    async with Server(origin) as server, Server(storage) as store:
        agent = connection(server.url)
        stats = FleetStats()
        downloads = AgentDownloads(httpx.AsyncClient(), stats, timeout=5, retry_delay=0)
        client = OnConnection(agent, elsewhere=httpx.AsyncClient)
        resumed = await downloads.fetch(server.url + "/bin", "00", holder=1, client=client)
        redirected = await downloads.fetch(server.url + "/moved", "00", holder=1, client=client)
        agent.close()
    assert (resumed.sha256, resumed.size) == (redirected.sha256, redirected.size) == (sha256(data), len(data))
    assert stats.download_resumes == 1
    assert [head.split(b" ")[1] for head, _ in server.requests] == [b"/bin", b"/bin", b"/moved"]
    assert len(store.requests) == 1
