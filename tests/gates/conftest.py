"""Gates' tests: the module's settings, releases, and a real HTTP server on 127.0.0.1 whose answers a test sets."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.factories import rollout_settings
from tests.rollout.conftest import releases  # noqa: F401  (shared fixture)


@pytest.fixture(autouse=True)
def module_settings(settings, tmp_path):
    """The rollout tests' settings, and gates that may call this machine's test servers."""
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.FLEET_MIN_PROTOCOL_VERSION = 2
    settings.FLEET_HEARTBEAT_SECONDS = 10
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    settings.ROLLOUT_GATE_URL_ALLOW = ["http://127.0.0.1:"]
    settings.ROLLOUT_PROMETHEUS_URL = None
    return settings


def vector(*values: str) -> bytes:
    """Prometheus' answer to an instant query: one sample per value."""
    result = [{"metric": {"i": str(i)}, "value": [1700000000.0, value]} for i, value in enumerate(values)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@dataclass
class Server:
    """A real HTTP server: every GET gets ``status``, ``content_type`` and ``body`` (bytes, or chunks of
    ``chunk`` bytes repeated ``chunks`` times); with ``hold`` it answers only when released or after 30 s."""

    port: int = 0
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    chunk: bytes = b""
    chunks: int = 0
    hold: bool = False
    paths: list[str] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            server.paths.append(self.path)
            if server.hold:
                server.release.wait(30)  # the slow answer: 30 s unless the test ends first
            length = len(server.body) + len(server.chunk) * server.chunks
            self.send_response(server.status)
            self.send_header("Content-Type", server.content_type)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            sent = 0
            try:
                self.wfile.write(server.body)
                sent += len(server.body)
                for _ in range(server.chunks):
                    self.wfile.write(server.chunk)
                    sent += len(server.chunk)
            except OSError:  # the client stopped reading
                pass
            server.sent.append(sent)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    running: list[tuple[ThreadingHTTPServer, threading.Thread, Server]] = []

    def start(**behaviour: object) -> Server:
        server = Server(**behaviour)  # type: ignore[arg-type]
        http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
        http.daemon_threads = True
        http.block_on_close = False
        server.port = http.server_address[1]
        thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        running.append((http, thread, server))
        return server

    yield start
    for http, thread, server in running:
        server.release.set()
        http.shutdown()
        http.server_close()
        thread.join(timeout=5)
