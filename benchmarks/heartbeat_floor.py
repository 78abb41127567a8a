"""Heartbeat path against a hand-written floor: the ratio real endpoint / floor, in ONE run.

The target (docs/architecture.md#scale-targets): at least 1.00.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks heartbeat-floor

Plain heartbeats only: no agent downloads anything (the simulator's download mode does not apply).

- **real**: ``POST /api/compute/agent/session`` as agents send it (Bearer token, JSON body), every
  request a plain heartbeat (session open, same version), through the whole stack: middleware,
  token authentication, strict parsing and validation, the session service, the JSON answer.
- **floor**: a hand-written Django view mounted (for this run only) at ``POST /bench/heartbeat-floor``
  beside the project's URLs: the same middleware, then one indexed SELECT (the node by its token
  hash) and one UPDATE (the session's ``last_seen_at``) through Django's cursor, ``json.loads`` of the
  body and a ``JsonResponse``: the least a Django heartbeat view can do.

Same gunicorn (``-w 3 -k gthread``, ``DATABASE_CONN_MAX_AGE=60``: persistent connections), same
database, same nodes, same load generator: ``--connections`` keep-alive HTTP/1.1 connections from
one asyncio loop, each sending its next request as soon as the answer is read (closed loop, so the
server is saturated), cycling through the nodes' tokens. Both endpoints are first warmed up
(unmeasured: gunicorn's workers import lazily, each database connection prepares its statement),
then measured in rounds that alternate which goes first (real, floor; floor, real; ...: an even
number of rounds, so neither always meets what the machine did just before), so that other load
on the machine falls on both; the ratio is of the summed rates.

The real endpoint is measured at its WORST case for write coalescing: the server's
``FLEET_HEARTBEAT_SECONDS`` is 1 and there are enough nodes that each one's heartbeats are more than
one second apart, so every heartbeat is due to write ``last_seen_at``, as the floor always does. The
printed "written" share (``pg_stat_user_tables.n_tup_upd`` of the session table per heartbeat)
shows it. With agents at the real cadence about half the heartbeats write nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heartbeats import (  # noqa: E402 - after the path fix-up above
    database_urls,
    free_port,
    manage,
    recreate_database,
    stop_process,
    wait_for_http,
)

REAL_PATH = "/api/compute/agent/session"
FLOOR_PATH = "/bench/heartbeat-floor"
VERSION = "1.0.0"
BODY = json.dumps({"daemonVersion": VERSION, "protocolVersion": 3}).encode()
QUICK_ARGV = ["--nodes", "3000", "--rounds", "2", "--seconds", "5"]


# --- the server side (imported by gunicorn) ----------------------------------------------------


def floor_view(request):
    """The floor: one indexed SELECT, one UPDATE, the answer. Hand-written, nothing shared with the real view."""
    import hashlib

    from django.db import connection
    from django.http import JsonResponse
    from django.utils import timezone

    header = request.META.get("HTTP_AUTHORIZATION", "")
    if request.method != "POST" or not header.startswith("Bearer "):
        return JsonResponse({"code": "not_authenticated", "detail": "Bearer token required."}, status=401)
    body = json.loads(request.body)
    digest = hashlib.sha256(header[7:].encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, spec FROM fleet_node WHERE agent_token_hash = %s", [digest])
        row = cursor.fetchone()
        if row is None:
            return JsonResponse({"code": "authentication_failed", "detail": "Unknown agent token."}, status=401)
        cursor.execute(
            "UPDATE fleet_nodesession SET last_seen_at = %s, protocol_version = %s WHERE node_id = %s",
            [timezone.now(), body["protocolVersion"], row[0]],
        )
    return JsonResponse({"spec": json.loads(row[1]), "commands": [], "heartbeatSeconds": 10})


def _urlpatterns() -> list:
    from django.urls import path
    from django.views.decorators.csrf import csrf_exempt

    from project.urls import urlpatterns

    return [path(FLOOR_PATH.lstrip("/"), csrf_exempt(floor_view)), *urlpatterns]


def __getattr__(name: str):
    # ``urlpatterns`` is built on first use, when Django is set up (this module is the run's ROOT_URLCONF).
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


def application():
    """``project.wsgi.application`` with this module as ROOT_URLCONF: the project's URLs plus the floor."""
    from django.conf import settings

    from project.wsgi import application as project_application

    settings.ROOT_URLCONF = __name__  # read at every request (BaseHandler sets the urlconf from it)
    return project_application


# --- the harness -------------------------------------------------------------------------------


def create_fleet(db_url: str, nodes: int) -> list[str]:
    """A tenant, a pool, ``nodes`` nodes with known agent tokens, each with an open session on VERSION."""
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.db import connection
    from django.utils import timezone

    from fleet.models import Node, NodeSession, Pool, Tenant
    from fleet.tokens import token_hash

    tenant = Tenant.objects.create(slug="floor", name="floor")
    pool = Pool.objects.create(tenant=tenant, name="floor")
    tokens = [f"at_bench_{i:06d}" for i in range(nodes)]
    created = Node.objects.bulk_create(
        (
            Node(tenant=tenant, pool=pool, name=f"n-{i:06d}", arch="amd64", agent_token_hash=token_hash(token))
            for i, token in enumerate(tokens)
        ),
        batch_size=5000,
    )
    # Long ago, so the first heartbeat of each node is due to write, as every later one is.
    then = timezone.now() - timedelta(hours=1)
    NodeSession.objects.bulk_create(
        (
            NodeSession(node=node, daemon_version=VERSION, protocol_version=3, joined_at=then, last_seen_at=then)
            for node in created
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE fleet_node")
        cursor.execute("VACUUM ANALYZE fleet_nodesession")
    connection.close()
    return tokens


def session_updates(db_url: str) -> int:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'fleet_nodesession'").fetchone()
        return int(row[0])


def request_bytes(path: str, token: str, port: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


async def load(
    port: int, requests: list[bytes], connections: int, seconds: float, next_index: list[int]
) -> tuple[int, int, float]:
    """(answered 200, other answers, elapsed): ``connections`` keep-alive connections, closed loop.

    ``next_index`` is where the cycle through the nodes goes on from (kept across calls).
    """
    counts = {"ok": 0, "bad": 0}
    stop_at = time.monotonic() + seconds

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < stop_at:
                index = next_index[0]
                next_index[0] = (index + 1) % len(requests)
                writer.write(requests[index])
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                counts["ok" if head.startswith(b"HTTP/1.1 200") else "bad"] += 1
                if b"\r\nconnection: close" in head.lower():  # a proxy's last request on it (nginx: 1,000)
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            writer.close()

    start = time.monotonic()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return counts["ok"], counts["bad"], time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks heartbeat-floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10000, help="nodes (each heartbeats >1 s apart: all due)")
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds of both endpoints, alternating which goes first (even)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per endpoint and round")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each measurement")
    parser.add_argument("--connections", type=int, default=24)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--database", default="rollout_bench_floor", help="dedicated database, dropped and recreated")
    options = parser.parse_args(argv)
    if options.rounds < 2 or options.rounds % 2:
        parser.error("--rounds must be even (each endpoint goes first in half of them)")

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout")
    db_url, admin_url = database_urls(base, options.database)
    work = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DATABASE_CONN_MAX_AGE": "60",
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "FLEET_HEARTBEAT_SECONDS": "1",
        "ROLLOUT_RUN_DIR": str(work / "run"),
        "PYTHONPATH": str(ROOT),
    }
    print(f"database {options.database}: recreate, migrate, {options.nodes} nodes with open sessions")
    recreate_database(admin_url, options.database)
    manage(env, "migrate", "--noinput")
    tokens = create_fleet(db_url, options.nodes)

    port = free_port()
    log = work / "gunicorn.log"
    command = [
        str(Path(sys.executable).parent / "gunicorn"),  # the virtualenv running this (make bench VENV=...)
        "benchmarks.heartbeat_floor:application()",
        *("-w", str(options.workers), "-k", "gthread", "--threads", str(options.threads)),
        *("-b", f"127.0.0.1:{port}", "--keep-alive", "30", "--timeout", "60"),
    ]
    print(f"gunicorn on 127.0.0.1:{port} ({options.workers} workers x {options.threads} threads)")
    with log.open("w") as log_file:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    requests = {
        "real": [request_bytes(REAL_PATH, token, port) for token in tokens],
        "floor": [request_bytes(FLOOR_PATH, token, port) for token in tokens],
    }
    totals = {name: [0, 0.0, 0, 0] for name in requests}
    round_rates: list[dict[str, float]] = []  # each round's hb/s per endpoint
    cursors = {name: [0] for name in requests}  # ok, seconds, bad, session rows updated
    try:
        wait_for_http(f"http://127.0.0.1:{port}/api/compute/pools/", 60, server, log)
        # The cold start, paid by neither measurement: with 6 s of warm-up, the first measured round
        # (about 15-25 s after the server started) still ran up to 30 % slower in some runs.
        for name in ("real", "floor"):
            asyncio.run(load(port, requests[name], options.connections, 5 * options.warmup, cursors[name]))
        print(f"\n{'round':<6} {'endpoint':<8} {'hb/s':>8} {'errors':>7} {'written':>8}")
        for round_index in range(options.rounds):
            round_rates.append({})
            for name in ("real", "floor") if round_index % 2 == 0 else ("floor", "real"):
                asyncio.run(load(port, requests[name], options.connections, options.warmup, cursors[name]))
                updates = session_updates(db_url)
                ok, bad, seconds = asyncio.run(
                    load(port, requests[name], options.connections, options.seconds, cursors[name])
                )
                time.sleep(1.1)  # a busy backend flushes its table statistics at most every second
                written = session_updates(db_url) - updates
                total = totals[name]
                total[0] += ok
                total[1] += seconds
                total[2] += bad
                total[3] += written
                round_rates[-1][name] = ok / seconds
                print(
                    f"{round_index + 1:<6} {name:<8} {ok / seconds:>8.0f} {bad:>7}"
                    f" {written / ok if ok else float('nan'):>8.2f}"
                )
    finally:
        stop_process(server)
    rates = {name: total[0] / total[1] for name, total in totals.items()}
    print(
        f"\nheartbeats/s over {options.rounds} x {options.seconds:g} s each: real {rates['real']:.0f},"
        f" floor {rates['floor']:.0f}; errors real {totals['real'][2]}, floor {totals['floor'][2]}"
    )
    per_round = " ".join(f"{r['real'] / r['floor']:.2f}" for r in round_rates if r.get("floor"))
    print(f"ratio real / floor per round: {per_round}")
    print(f"ratio real / floor: {rates['real'] / rates['floor']:.2f}  (target: at least 1.00)")
    shutil.rmtree(work, ignore_errors=True)
    errors = totals["real"][2] + totals["floor"][2]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
