"""What counting a request against its credential costs the web process (docs/operations.md#request-limits).

    CACHE_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m benchmarks request-limits

``fleet.api.limits.RequestLimitMiddleware`` in front of a view that does nothing, against the same view
alone, for plain heartbeats of 10,000 agent tokens in turn (as ``heartbeat-floor`` sends them). The CPU
time is the process's, every thread's: the background flushes to the shared store (``CACHE_URL``) are in
it; Redis's own work is not. Rounds alternate, so other load on the machine falls on both. Compare the
difference with a whole plain heartbeat's cost (``heartbeat-floor``: about 1,200 µs of the machine's CPU
per heartbeat at 1,700 heartbeats/s on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUICK_ARGV = ["--requests", "20000", "--rounds", "2"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks request-limits", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=60000, help="requests per round and variant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=10000)
    options = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory

    from fleet.api.limits import RequestLimitMiddleware

    factory = RequestFactory()
    requests = [
        factory.post(
            "/api/compute/agent/session",
            b'{"daemonVersion":"1.0.0","protocolVersion":3}',
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer at_bench_{i:06d}",
        )
        for i in range(options.tokens)
    ]
    answer = HttpResponse()

    def view(request: HttpRequest) -> HttpResponse:
        return answer

    variants = {"view alone": view, "with the limits": RequestLimitMiddleware(view)}

    def measure(handler, n: int) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            handler(requests[i % len(requests)])
            if i % 1000 == 999:
                time.sleep(0.001)  # a breath, as between requests: the flushing thread runs
        return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6

    measure(variants["with the limits"], 5000)  # warm up: the flushing thread, the store's connection
    store = settings.CACHE_URL or "none: counts per process"
    print(f"store (CACHE_URL): {store}; {options.tokens} agent tokens; {options.requests} requests per round")
    print(f"\n{'round':<6} {'variant':<16} {'µs CPU/request':>15} {'µs wall/request':>16}")
    totals = {name: 0.0 for name in variants}
    for round_index in range(options.rounds):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in order:
            cpu, wall = measure(variants[name], options.requests)
            totals[name] += cpu
            print(f"{round_index + 1:<6} {name:<16} {cpu:>15.1f} {wall:>16.1f}")
    cost = (totals["with the limits"] - totals["view alone"]) / options.rounds
    print(f"\ncounting a request: {cost:.1f} µs of CPU ({cost / 1200:.1%} of a plain heartbeat's ~1,200 µs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
