"""A simulated agent's download cut half-way resumes from where it stopped (Range + If-Range), on every path.

A TCP proxy on loopback stands between the agent and the server and closes the first connection
after half the binary: the agent's second request asks for the rest only, and the bytes fetched
twice are at most one chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest

from simulator import AgentDownloads, FleetStats
from simulator.downloads import CHUNK
from tests.delivery.conftest import store_release

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SIZE = 1 << 20


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to ``target``; closes the first connection after ``cut_after`` bytes from it."""

    def __init__(self, target: tuple[str, int], cut_after: int):
        self.target = target
        self.cut_after = cut_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.from_server = 0  # bytes forwarded to the agent, every connection
        self.requests: list[bytes] = []  # what the agent sent, per connection
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                with self._lock:
                    index = len(self.requests)
                    self.requests.append(b"")
                upstream = socket.create_connection(self.target)
                threading.Thread(target=self._to_server, args=(client, upstream, index), daemon=True).start()
                threading.Thread(target=self._to_client, args=(upstream, client, index), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket, index: int) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self._lock:
                    self.requests[index] += data
                upstream.sendall(data)

    def _to_client(self, upstream: socket.socket, client: socket.socket, index: int) -> None:
        sent = 0
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if index == 0 and sent + len(data) >= self.cut_after:
                    data = data[: self.cut_after - sent]
                client.sendall(data)
                sent += len(data)
                with self._lock:
                    self.from_server += len(data)
                if index == 0 and sent >= self.cut_after:
                    break  # the link drops
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()


def test_a_download_cut_half_way_resumes_where_it_stopped(base_url):
    data = os.urandom(SIZE)
    binary = store_release("1.0.0", data)
    server = urlsplit(base_url)
    proxy = CuttingProxy((server.hostname, server.port), cut_after=SIZE // 2)
    stats = FleetStats()

    async def download():
        async with httpx.AsyncClient() as client:
            agent = AgentDownloads(client, stats, rate=8 << 20, timeout=10)
            return await agent.fetch(f"http://127.0.0.1:{proxy.port}{binary.path}", binary.sha256, holder=0)

    try:
        fetched = asyncio.run(download())
    finally:
        proxy.close()
    assert (fetched.sha256, fetched.size) == (hashlib.sha256(data).hexdigest(), SIZE)
    assert (stats.downloads, stats.download_resumes) == (1, 1)
    assert len(proxy.requests) == 2
    resumed = proxy.requests[1].decode().lower()
    received = int(resumed.split("range: bytes=", 1)[1].split("-", 1)[0])
    assert 0 < received <= SIZE // 2
    assert f'if-range: "{binary.sha256}"' in resumed
    # Fetched twice: at most one chunk (here none: the agent hashed every byte it got before the cut).
    assert stats.download_bytes <= SIZE + CHUNK
    assert proxy.from_server <= SIZE + CHUNK + 4096  # the two answers' headers included
