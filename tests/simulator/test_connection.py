"""A watching agent's own connection (simulator/connection.py) against a real socket server: one keep-alive
connection for its calls, every way an HTTP/1.1 answer may be framed, and httpx's errors when it fails."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest

from simulator.connection import AgentConnection

Handler = Callable[[bytes, bytes], Awaitable[bytes | None]]  # (request head, body) -> raw answer; None: close


class Server:
    """An HTTP/1.1 server that answers each request with what ``handler`` writes, counting its connections."""

    def __init__(self, handler: Handler, *, close_after_each: bool = False) -> None:
        self.handler = handler
        self.close_after_each = close_after_each
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

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
        await asyncio.sleep(0.1)  # the server has closed it
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
