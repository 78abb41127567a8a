"""The simulated agents retry as the agent protocol says (docs/fleet.md#retries, simulator/retry.py): a 503 with
``Retry-After`` is waited out plus a random fraction of a second, so that agents refused together do not come back
together; any other failure backs off exponentially with full jitter, capped at the interval.

The overloaded server is a real HTTP server on loopback that refuses each agent's first session request (503
``overloaded``, ``Retry-After: 2``) and answers the second, recording when each came."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from simulator import AgentConfig, Fleet
from simulator.retry import FIXED, backoff

AGENTS = 200
TOLD = 2
ANSWER = {"spec": {}, "commands": [], "heartbeatSeconds": 60, "specRevision": "r", "rootVersion": 1}


class OverloadedServer:
    """Refuses each agent's first session request with 503 ``overloaded`` and ``Retry-After``; answers the next."""

    def __init__(self) -> None:
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        arrivals, lock = self.arrivals, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    seen = arrivals[self.headers["Authorization"]]
                    seen.append(time.monotonic())
                    first = len(seen) == 1
                if first:
                    body = {"code": "overloaded", "detail": "busy", "retryAfter": TOLD}
                    self._answer(503, body, [("Retry-After", str(TOLD))])
                else:
                    self._answer(200, ANSWER, [])

            def _answer(self, status: int, body: dict, headers: list[tuple[str, str]]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers]:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def retried_after(self) -> list[float]:
        """Per agent: seconds from its refused request to its next one."""
        return [seen[1] - seen[0] for seen in self.arrivals.values() if len(seen) >= 2]


@pytest.fixture
def overloaded() -> Iterator[OverloadedServer]:
    server = OverloadedServer()
    thread = threading.Thread(target=server.httpd.serve_forever, name="overloaded", daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def refused_together(url: str, **options) -> Fleet:
    """AGENTS agents whose first requests all go at once (no start spread), run until each was answered."""
    configs = [AgentConfig(token=f"t-{n}", name=f"a-{n}") for n in range(AGENTS)]
    fleet = Fleet(url, configs, heartbeat_seconds=60, start_spread=0, **options)
    met = asyncio.run(fleet.run(until=lambda f: all(agent.heartbeats for agent in f.agents), timeout=30))
    assert met, fleet.status_line()
    return fleet


def test_agents_refused_together_wait_their_retry_after_and_come_back_spread(overloaded):
    fleet = refused_together(overloaded.url, record_latencies=True)
    assert fleet.stats.overloaded == AGENTS
    assert fleet.stats.answers == {503: AGENTS, 200: AGENTS}
    assert fleet.stats.errors == 0  # a 503 waited out is not an agent error
    # Honoured: no agent came back before its Retry-After (as the server saw it; a loaded machine only adds).
    assert len(overloaded.retried_after()) == AGENTS
    assert min(overloaded.retried_after()) >= TOLD
    # Not synchronised: each agent waited Retry-After plus its own fraction of a second, spread over the whole
    # second (no tenth of it holds a quarter of the agents), as it chose them.
    waits = fleet.stats.retry_waits
    assert len(waits) == AGENTS
    assert all(TOLD <= wait < TOLD + 1 for wait in waits)
    tenths = [int((wait - TOLD) * 10) for wait in waits]
    assert len(set(tenths)) == 10
    assert max(tenths.count(tenth) for tenth in set(tenths)) < AGENTS / 4
    assert abs(statistics.mean(waits) - (TOLD + 0.5)) < 0.1


def test_fixed_retries_come_back_together(overloaded):
    """The simulator's retries before the rule (``retry="fixed"``, kept to measure against): each agent waits
    exactly ``Retry-After``, so agents refused together come back together."""
    fleet = refused_together(overloaded.url, retry=FIXED, record_latencies=True)
    assert fleet.stats.retry_waits == [TOLD] * AGENTS
    assert min(overloaded.retried_after()) >= TOLD


def test_backoff_is_exponential_with_full_jitter_capped_at_the_interval():
    rngs = [random.Random(n) for n in range(1000)]
    for failures, window in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (30, 10), (500, 10)]:
        delays = [backoff(failures, cap=10, rng=rng) for rng in rngs]
        assert all(0 <= delay <= window for delay in delays), failures
        # Full jitter: spread over the whole window, not bunched at its end.
        assert min(delays) < window * 0.05, failures
        assert max(delays) > window * 0.95, failures
        assert abs(statistics.mean(delays) - window / 2) < window * 0.05, failures
