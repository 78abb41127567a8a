"""A real local HTTP server that answers as the API would, for what the live server cannot be made to answer on
demand (a 503, a 429, a proxy's HTML page, a rollout that pauses and resumes between two reads) and for the
arguments that must never reach a server.

What each command sends and prints is tested against the live server: tests/integration/test_ctl_*.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from rollout.ctl.cli import main

KEY = "rk_test_0123456789"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


@dataclass
class FakeApi:
    """Routes ``(method, path)`` to answers ``(status, body)`` or ``(status, body, headers)``; a list of answers
    is given in order, its last one repeating. Every request is recorded (with its monotonic time)."""

    url: str = ""
    routes: dict[tuple[str, str], Any] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def on(self, method: str, path: str, *answers: tuple[int, Any]) -> None:
        self.routes[(method, "/api/compute/" + path)] = list(answers)

    def answer(self, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
        answers = self.routes.get((method, path))
        if not answers:
            return 404, {"code": "not_found", "detail": f"no route {method} {path} in the fake"}, {}
        status, body, *headers = answers.pop(0) if len(answers) > 1 else answers[0]
        return status, body, headers[0] if headers else {}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    fake.on("GET", "pools/", (200, {"results": [], "next": None}))  # the names shown instead of pool ids

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            fake.seen.append(
                Seen(
                    self.command,
                    parts.path,
                    dict(parse_qsl(parts.query)),
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
            )
            status, body, headers = fake.answer(self.command, parts.path)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/html" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def ctl(api, monkeypatch, capsys):
    """Run the command line in this process against the fake: ``(exit status, stdout, stderr)``."""
    monkeypatch.setenv("ROLLOUT_SERVER", api.url)
    monkeypatch.setenv("ROLLOUT_API_KEY", KEY)
    monkeypatch.setenv("COLUMNS", "160")

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors and --help
            status = int(exc.code or 0)
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def wave(index: int, percent: float, **counts: int) -> dict[str, Any]:
    """A wave of the rollout representation: every count 0 unless given."""
    zero = dict.fromkeys(
        ("total", "pending", "inFlight", "succeeded", "failed", "skipped", "rolledBack", "cancelled"), 0
    )
    return {"index": index, "percent": percent, **zero, **counts, "startedAt": None, "settledAt": None}


def rollout(state: str = "active", **fields: Any) -> dict[str, Any]:
    """A rollout as the API represents it (docs/api.md#rollouts)."""
    body: dict[str, Any] = {
        "id": "7d1c9a52-4f3e-4c59-9d7e-1f0b8a6c2e11",
        "version": "1.4.0",
        "state": state,
        "poolIds": ["a1b2"],
        "waves": [wave(0, 10, total=2, succeeded=2), wave(1, 100, total=18, pending=10, inFlight=3, succeeded=5)],
        "currentWave": 1,
        "maxFailureRatio": 0.1,
        "soakSeconds": 300,
        "upgradeTimeoutSeconds": 600,
        "pausedReason": None,
        "blocker": None,
        "createdAt": "2026-12-04T16:00:00Z",
        "completedAt": None,
    }
    return body | fields
