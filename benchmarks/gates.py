"""What evaluating gates costs a worker (docs/controller.md#gates): 1,000 active rollouts with 2 gates each.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks gates

Each rollout has a Prometheus gate and an HTTP gate, asked every 30 s (the default interval). The
benchmark makes every gate due at once, then runs the evaluation task's body
(``gates_evaluate_due``: claim with SKIP LOCKED, ask on 16 threads, record) in this process until
none is due, and reports the process's CPU (every thread's) and wall time per round, per evaluation,
and as a share of one worker process over the 30 s period. The PostgreSQL backend's CPU is read from
/proc when the server runs on this machine. Prometheus and the health URL are a small HTTP server in
a process of its own (answering an instant vector and 200), so its CPU is not counted: the figure is
the worker's. The gates' own database, ``rollout_bench_gates``, is dropped and recreated each run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database  # noqa: E402

BENCH_DATABASE = "rollout_bench_gates"
QUICK_ARGV = ["--rollouts", "200", "--rounds", "2"]
PERIOD_SECONDS = 30

# Prometheus and the health endpoint, in a process of their own: prints its port, serves until killed.
SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
VECTOR = json.dumps({"status": "success", "data": {"resultType": "vector",
    "result": [{"metric": {"job": "api"}, "value": [1700000000, "0.02"]}]}}).encode()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = VECTOR if self.path.startswith("/api/v1/query") else b"ok"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer.request_queue_size = 128  # Prometheus' backlog is large; 5 (the default) drops SYNs
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _setup_django(db_url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DATABASE_URL"] = db_url
    os.environ["DATABASE_CONN_MAX_AGE"] = "0"
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ.setdefault("ROLLOUT_RUN_DIR", tempfile.mkdtemp(prefix="bench-gates-"))
    import logging

    import django

    django.setup()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)


def _make_rollouts(count: int, port: int) -> None:
    """``count`` active rollouts of one node each, with a Prometheus and an HTTP gate (no network at create)."""
    from django.utils import timezone

    from fleet.services.iam import tenant_create
    from rollout.models import Release, Rollout, RolloutGate
    from rollout.registry.releases import release_register
    from tests.factories import manifest, signed

    release_register(envelope=signed(manifest("1.0.0", 1)))
    release = Release.objects.get()
    tenant = tenant_create(slug="bench-gates")
    now = timezone.now()
    rollouts = Rollout.objects.bulk_create(
        Rollout(
            tenant=tenant,
            release=release,
            waves=[100],
            max_failure_ratio="0.1",
            soak_seconds=0,
            upgrade_timeout_seconds=600,
            gate_interval_seconds=PERIOD_SECONDS,
            created_at=now,
        )
        for _ in range(count)
    )
    RolloutGate.objects.bulk_create(
        gate
        for rollout in rollouts
        for gate in (
            RolloutGate(
                rollout=rollout,
                position=0,
                name="errors",
                kind=RolloutGate.Kind.PROMETHEUS,
                query='sum(rate(http_requests_total{code=~"5.."}[5m]))',
                maximum=0.5,
                due_at=now,
            ),
            RolloutGate(
                rollout=rollout,
                position=1,
                name="health",
                kind=RolloutGate.Kind.HTTP,
                url=f"http://127.0.0.1:{port}/health",
                due_at=now,
            ),
        )
    )


def _backend_cpu() -> float | None:
    """This connection's PostgreSQL backend's CPU seconds so far (/proc), or None when not readable here."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gates", description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", default=BENCH_DATABASE, help="dedicated database, dropped and recreated")
    options = parser.parse_args(argv)
    base = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    db_url, admin_url = database_urls(base, options.database)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline()) if server.stdout else 0
        print(f"database {options.database}: drop, create, migrate; gates' server on 127.0.0.1:{port}")
        recreate_database(admin_url, options.database)
        _setup_django(db_url)
        from django.conf import settings
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        from tests.factories import rollout_settings

        settings.ROLLOUT = rollout_settings()
        settings.ROLLOUT_PROMETHEUS_URL = f"http://127.0.0.1:{port}"
        settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
        settings.ROLLOUT_GATE_URL_ALLOW = [f"http://127.0.0.1:{port}/"]
        _make_rollouts(options.rollouts, port)
        return _measure(options.rollouts, options.rounds)
    finally:
        server.kill()
        server.wait()


def _measure(rollouts: int, rounds: int) -> int:
    from django.db.models import Count
    from django.utils import timezone

    from rollout.controller.gate_evaluation import gates_evaluate_due
    from rollout.models import RolloutGate

    gates = rollouts * 2
    print(f"{rollouts} active rollouts x 2 gates (Prometheus + HTTP) = {gates} evaluations per {PERIOD_SECONDS} s")
    header = f"{'round':<6} {'evaluated':>9} {'wall s':>7} {'CPU s':>6} {'CPU ms/eval':>11} {'PG CPU ms/eval':>14}"
    print(f"\n{header} {'worker share':>12}")
    worst = 0.0
    for index in range(rounds):
        RolloutGate.objects.update(due_at=timezone.now())
        pg_before = _backend_cpu()
        cpu, wall = time.process_time(), time.perf_counter()
        evaluated = gates_evaluate_due(run_seconds=600)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        pg_after = _backend_cpu()
        pg = f"{(pg_after - pg_before) / evaluated * 1000:.2f}" if pg_before is not None and pg_after else "?"
        share = max(cpu, wall) / PERIOD_SECONDS
        worst = max(worst, share)
        print(
            f"{index + 1:<6} {evaluated:>9} {wall:>7.1f} {cpu:>6.1f} {cpu / evaluated * 1000:>11.2f} {pg:>14}"
            f" {share:>11.0%}"
        )
    states = dict(RolloutGate.objects.values_list("state").annotate(n=Count("id")).order_by())
    print(f"\nresults: {states}")
    print(
        f"worker share = max(CPU, wall) of a round / {PERIOD_SECONDS} s: the part of one worker process the gates "
        f"take (below 100 %: one process keeps up). Worst round: {worst:.0%}."
    )
    if set(states) != {"pass"}:
        print("FAILED: every gate should have passed (the server answers a healthy vector and 200)")
        return 1
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
