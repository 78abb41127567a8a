"""Held agent sessions on the production web tier: 10,000 at once, its memory, and plain heartbeats beside them.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks watch [--held 10000]

One database (``rollout_bench_watch``) with ``--held`` watching nodes and ``--plain`` polling ones, every session
open; ``FLEET_HEARTBEAT_SECONDS=60`` (what a watching fleet runs). Three phases, each after a warm-up:

1. the previous tier, gunicorn ``gthread`` serving ``project.wsgi`` (``--workers`` x 4 threads, no proxy): plain
   heartbeats/s from a closed loop of 24 keep-alive connections cycling through the plain nodes (the
   heartbeat-floor's load): the floor;
2. the production tier as operators run it, ``make web``'s (demo/web.py: nginx with docker/nginx.conf in front of
   gunicorn as gunicorn.conf.py runs it, uvicorn workers serving ``project.asgi``, ``--workers`` x ``WEB_THREADS``),
   the load sent to nginx: the same load;
3. the same tier while ``--held`` agents each hold a session request through nginx (one connection each, ``wait``
   60, sent again when answered): its RSS (every process of the tier, nginx's included), its database
   connections, the same plain load again, and the wake: ``--wake`` held nodes get a new spec in one UPDATE, and
   every one of them is answered; the time from just before that COMMIT to each answer.

The ratio columns are against phase 1, measured in the same run. Targets (docs/fleet.md#watch): 10,000 held
within 1 GiB of web RSS, plain heartbeats at least at the previous tier's rate, every woken request answered within
1 s of the commit (the bound tests/watch/test_simulator_watch.py leaves to this benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heartbeat_floor import REAL_PATH, create_fleet, load, request_bytes  # noqa: E402 - after the path fix-up
from benchmarks.heartbeat_probes import ProcessSampler, percentile  # noqa: E402
from benchmarks.heartbeats import (  # noqa: E402
    database_urls,
    free_port,
    manage,
    recreate_database,
    stop_process,
    wait_for_http,
)
from demo.web import WebTier  # noqa: E402
from demo.web import start as start_web_tier  # noqa: E402

QUICK_ARGV = ["--held", "1000", "--plain", "1000", "--seconds", "5", "--wake", "100"]
VERSION = "1.0.0"


class Holders:
    """``tokens`` agents on one event loop (a thread), each holding a session request on a connection of its own."""

    def __init__(self, port: int, tokens: list[str], revision: str) -> None:
        self.port, self.tokens, self.revision = port, tokens, revision
        self.answers: dict[str, float] = {}  # token -> monotonic time of its last answer
        self.errors = 0
        self.stopping = False
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self._main())

    @staticmethod
    def body(seen: str) -> bytes:
        return json.dumps({"daemonVersion": VERSION, "protocolVersion": 3, "wait": 60, "seen": seen}).encode()

    async def _main(self) -> None:
        connecting = asyncio.Semaphore(200)  # the listen backlog: open the connections 200 at a time
        await asyncio.gather(*(self._agent(token, connecting) for token in self.tokens), return_exceptions=True)

    async def _agent(self, token: str, connecting: asyncio.Semaphore) -> None:
        async with connecting:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        seen = self.revision
        try:
            while not self.stopping:
                body = self.body(seen)
                writer.write(
                    f"POST {REAL_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                answer = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line[15:]) for line in answer.split(b"\r\n") if line.lower().startswith(b"content-l"))
                content = await reader.readexactly(length)
                self.answers[token] = time.monotonic()
                if not answer.startswith(b"HTTP/1.1 200"):
                    self.errors += 1
                    return
                seen = json.loads(content)["specRevision"]  # as an agent does: then watch the new revision
        except (OSError, asyncio.IncompleteReadError):
            if not self.stopping:
                self.errors += 1
        finally:
            writer.close()

    def start(self) -> Holders:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.thread.join(timeout=30)


def server(command: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def measure(port: int, tokens: list[str], seconds: float) -> float:
    requests = [request_bytes(REAL_PATH, token, port) for token in tokens]
    cursor = [0]
    asyncio.run(load(port, requests, 24, 10, cursor))  # warm-up: workers import lazily, connections prepare
    ok, bad, elapsed = asyncio.run(load(port, requests, 24, seconds, cursor))
    if bad:
        raise SystemExit(f"{bad} plain heartbeats were not answered 200")
    return ok / elapsed


def tier_rss_kib(tier: WebTier) -> int:
    """Resident memory of every process of the tier: nginx's master and workers, gunicorn's arbiter and workers."""
    return sum(
        ProcessSampler.rss_kib(pid) for process in tier.processes.values() for pid in ProcessSampler.tree(process.pid)
    )


def held_gauge(port: int) -> int:
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return int(sum(float(line.split()[1]) for line in text.splitlines() if line.startswith("fleet_watch_held ")))


def connections_of(db_url: str, database: str) -> int:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database]
        ).fetchone()
    return int(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--held", type=int, default=10_000, help="agents holding a session request")
    parser.add_argument("--plain", type=int, default=3_000, help="nodes the plain load cycles through")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds of plain load per phase")
    parser.add_argument("--wake", type=int, default=1000, help="held nodes given a new spec at once")
    parser.add_argument("--database", default="rollout_bench_watch")
    options = parser.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    db_url, admin_url = database_urls(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout"), options.database
    )
    work = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    work.chmod(0o755)  # nginx's workers (nobody, when run as root) reach gunicorn's socket and their files in it
    (work / "prometheus").mkdir()
    (work / "media").mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DATABASE_CONN_MAX_AGE": "60",
        "LOG_LEVEL": "WARNING",
        "FLEET_HEARTBEAT_SECONDS": "60",
        # The closed loop sends each plain node's heartbeat many times a minute, far more often than its agent
        # would: requests are still counted (what that costs is part of the tier), never refused (429).
        "AGENT_TOKEN_RATE": "100000/min",
        "METRICS_PUBLIC": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
        "ROLLOUT_RUN_DIR": str(work / "run"),
        "PYTHONPATH": str(ROOT),
    }
    print(f"database {options.database}: {options.held:,} watching and {options.plain:,} polling nodes", flush=True)
    recreate_database(admin_url, options.database)
    manage(env, "migrate", "--noinput")
    tokens = create_fleet(db_url, options.held + options.plain)
    held_tokens, plain_tokens = tokens[: options.held], tokens[options.held :]
    rows: list[tuple[str, int, float, str]] = []

    port = free_port()
    # The previous tier: gunicorn.conf.py's settings but for the worker class and threads it ran with.
    wsgi_command = [str(ROOT / ".venv/bin/gunicorn"), "project.wsgi:application", "-k", "gthread", "--threads", "4"]
    wsgi = server(
        [*wsgi_command, "-w", str(options.workers), "-b", f"127.0.0.1:{port}"],
        env,
        work / "wsgi.log",
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/api/compute/pools/", 60, wsgi, work / "wsgi.log")
        floor = measure(port, plain_tokens, options.seconds)
        rows.append(
            (
                "gunicorn gthread, project.wsgi",
                0,
                floor,
                f"{sum(map(ProcessSampler.rss_kib, ProcessSampler.tree(wsgi.pid))) / 1024:.0f} MiB",
            )
        )
    finally:
        stop_process(wsgi)

    port = free_port()
    tier = start_web_tier(
        {**env, "WEB_WORKERS": str(options.workers)},
        port=port,
        media_root=work / "media",
        run_dir=work / "run" / "web",
        log_dir=work,
    )
    name = f"make web: nginx + {options.workers} uvicorn"
    holders = None
    try:
        rate = measure(port, plain_tokens, options.seconds)
        rows.append((name, 0, rate, f"{tier_rss_kib(tier) / 1024:.0f} MiB"))

        import httpx

        revision = httpx.post(
            f"http://127.0.0.1:{port}{REAL_PATH}",
            json={"daemonVersion": VERSION, "protocolVersion": 3},
            headers={"Authorization": f"Bearer {held_tokens[0]}"},
        ).json()["specRevision"]
        started = time.monotonic()
        holders = Holders(port, held_tokens, revision).start()
        deadline = time.monotonic() + 300
        while held_gauge(port) < options.held:
            if time.monotonic() > deadline or holders.errors:
                raise SystemExit(f"only {held_gauge(port)} of {options.held} held ({holders.errors} errors)")
            time.sleep(0.5)
        print(f"{options.held:,} requests held {time.monotonic() - started:.1f} s after the first was sent", flush=True)
        rss = tier_rss_kib(tier)
        connections = connections_of(db_url, options.database)
        rate = measure(port, plain_tokens, options.seconds)
        rows.append((name, options.held, rate, f"{rss / 1024:.0f} MiB"))

        woken = held_tokens[: options.wake]
        before = {token: holders.answers.get(token, 0.0) for token in woken}
        import psycopg

        with psycopg.connect(db_url) as conn:
            conn.execute(
                'UPDATE fleet_node SET spec = \'{"daemon": {"version": "1.1.0"}}\' WHERE agent_token_hash = ANY(%s)',
                [[hashlib.sha256(token.encode()).hexdigest() for token in woken]],
            )
            committing = time.monotonic()
        deadline = time.monotonic() + 60
        while any(holders.answers.get(token, 0.0) == before[token] for token in woken):
            if time.monotonic() > deadline:
                raise SystemExit("some woken held requests were never answered")
            time.sleep(0.05)
        latencies = [holders.answers[token] - committing for token in woken]
        errors = holders.errors
    finally:
        if holders is not None:
            holders.stop()
        tier.stop()

    print(f"\n{'web tier':<34} {'held':>7} {'plain hb/s':>11} {'vs WSGI':>8} {'tier RSS':>9}")
    for tier_name, held, rate, rss_text in rows:
        print(f"{tier_name:<34} {held:>7,} {rate:>11.0f} {rate / floor:>7.2f}x {rss_text:>9}")
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    print(
        f"\nwake: {options.wake:,} held nodes given a new spec in one UPDATE: answered p50 {p50:.0f} ms,"
        f" p99 {p99:.0f} ms, last {max(latencies) * 1000:.0f} ms after the commit"
    )
    print(f"database connections of the tier while {options.held:,} were held: {connections}")
    print(f"held-request errors: {errors}")
    print(
        f"targets: {options.held:,} held within 1 GiB of the tier's RSS (nginx and gunicorn);"
        " plain hb/s while held >= the WSGI tier's (1.00x); every woken request answered within 1 s of the commit"
        f" ({'met' if max(latencies) < 1.0 else 'NOT met'}: the last at {max(latencies) * 1000:.0f} ms)"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
