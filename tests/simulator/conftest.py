"""Fixtures of the simulator tests: a loopback binary server, signed sections, nodes with tokens."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fleet.models import Node, Pool, Tenant
from fleet.services.iam import api_key_create
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from rollout.release.manifest import manifest_for, manifest_to_bytes
from tests.factories import signed


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def signed_release(
    version: str,
    data: bytes,
    *,
    sequence: int = 1,
    keys: tuple[int, ...] = (0,),
    expires: datetime | None = None,
    arch: str = "amd64",
) -> dict[str, Any]:
    """The DSSE envelope (as a JSON object) of a bcd release whose ``linux-<arch>`` binary is ``data``."""
    manifest = manifest_for(version=version, sequence=sequence, binaries={f"linux-{arch}": data}, expires=expires)
    return json.loads(signed(manifest_to_bytes(manifest), *keys))


def signed_section(version: str, data: bytes, *, url: str, **release: Any) -> dict[str, Any]:
    """A daemon section as the server sends it: {"version", "url", "sha256", "release"}."""
    return {"version": version, "url": url, "sha256": sha256(data), "release": signed_release(version, data, **release)}


class BinaryServer:
    """A tiny HTTP server on 127.0.0.1 serving fixed bytes per path, counting GETs per path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.statuses: dict[str, int] = {}  # a path answered with this status instead (its body empty)
        self.hits: Counter = Counter()
        files, hits, statuses = self.files, self.hits, self.statuses

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                hits[self.path] += 1
                data = files.get(self.path)
                if data is None or self.path in statuses:
                    self.send_response(statuses.get(self.path, 404))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="binaries", daemon=True)

    def add(self, version: str, data: bytes, arch: str = "amd64", **release: Any) -> dict:
        """Serve ``data`` as bcd ``version``; returns its signed daemon section (``signed_section``)."""
        path = f"/bcd/{version}/linux-{arch}"
        self.files[path] = data
        return signed_section(version, data, url=self.url + path, arch=arch, **release)

    def hits_for(self, section: dict) -> int:
        return self.hits[section["url"].removeprefix(self.url)]


@pytest.fixture
def binaries() -> Iterator[BinaryServer]:
    server = BinaryServer()
    server._thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def pool(tenant: Tenant) -> Pool:
    return pool_create(tenant=tenant, name="sim-a")


@pytest.fixture
def operator_key(tenant: Tenant) -> str:
    """A plain operator key with compute:fleet:admin on ``tenant`` (the simulator needs the plain key)."""
    _, plain = api_key_create(tenant=tenant, username="sim-operator", grants=["compute:fleet:admin"])
    return plain


def make_nodes(pool: Pool, count: int, prefix: str = "sim") -> list[tuple[Node, str]]:
    """``count`` nodes of ``pool`` through the fleet service, with their plain agent tokens."""
    return [
        node_create(tenant=pool.tenant, name=f"{prefix}-{index:03d}", pool_id=pool.id, arch="amd64")
        for index in range(count)
    ]


@pytest.fixture(autouse=True)
def _fast_agents_allowed(settings):
    """These agents beat every 0.2-0.5 s (up to 50 per heartbeatSeconds of 10 s): their tokens' limit says so.
    tests/simulator/test_limits.py sets its own."""
    settings.AGENT_TOKEN_RATE = "100/heartbeat"
