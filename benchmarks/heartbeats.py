"""Heartbeat benchmark: 1,000 simulated agents against gunicorn + PostgreSQL, on loopback.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks.heartbeats

What it does, bounded in time (every wait has a deadline) and on 127.0.0.1 only:
1. (re)creates a dedicated database (``rollout_bench`` on the server of
   DATABASE_URL) and migrates it;
2. creates a tenant and an operator key (``createtenant``, ``createapikey``);
3. starts ``gunicorn -w 4 -k gthread --threads 8`` on a free port with
   ``DATABASE_CONN_MAX_AGE=60`` (connections reused), serving
   ``project.wsgi.application`` through a thin wrapper that counts the SQL
   statements each ``POST /api/compute/agent/session`` runs
   (``connection.execute_wrapper``; each worker writes its counts to a file);
4. enrolls the nodes through the API (``POST /api/compute/pools/``, ``/nodes/``);
5. runs the agents (simulator) with a short heartbeat interval,
   waits until all have joined, then measures a window of ``--duration``
   seconds: heartbeats/s, heartbeat latency p50/p99 (client side, request
   sent to response read), errors, SQL statements per heartbeat (counted in
   the server, as above) and, as a cross-check, committed transactions per
   heartbeat from ``pg_stat_database.xact_commit`` (in autocommit every
   statement is its own transaction);
6. stops the agents and gunicorn, and prints a table.

No rollout runs, so no agent downloads anything: the download mode (per agent or
``--shared-downloads``) does not apply.

pg_stat_statements would be the natural counter, but it needs
``shared_preload_libraries`` and a server restart; the benchmark does not
reconfigure a shared PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `project` importable
    sys.path.insert(0, str(ROOT))

from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database  # noqa: E402
from benchmarks.heartbeat_probes import (  # noqa: E402
    QUERY_DIR_ENV,
    CpuSampler,
    children,
    percentile,
    pg_snapshot,
    read_query_counts,
)
from demo.processes import free_port  # noqa: E402

# --- the harness -------------------------------------------------------------------------------


def manage(env: dict, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def wait_for_http(url: str, timeout: float, process: subprocess.Popen, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"gunicorn did not answer within {timeout}s:\n{log.read_text()[-3000:]}")


def stop_process(process: subprocess.Popen, timeout: float = 20) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


async def measure_phase(
    options: argparse.Namespace, interval: float, base_url: str, nodes: list, db_url: str, query_dir: Path
) -> dict:
    """Run every agent at ``interval``; measure ``options.duration`` seconds once all have joined."""
    import simulator

    fleet = simulator.Fleet(
        base_url,
        [simulator.AgentConfig(token=node.token, name=node.name) for node in nodes],
        heartbeat_seconds=interval,
        record_latencies=True,
        request_timeout=30.0,
        seed=options.seed,
        max_connections=options.max_connections,
    )
    running = asyncio.create_task(fleet.run(timeout=options.warmup + options.duration + 60))
    try:
        # Warm-up: every agent has had its first beat answered, then one more interval.
        deadline = time.monotonic() + options.warmup
        while fleet.stats.joins < len(nodes) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        joined = fleet.stats.joins
        await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))

        def mark() -> tuple:
            return (
                time.monotonic(),
                time.process_time(),
                fleet.stats.heartbeats,
                len(fleet.stats.latencies),
                fleet.stats.errors,
                read_query_counts(query_dir),
                pg_snapshot(db_url, options.database)[0],
            )

        # CPU of gunicorn's workers and of the database's backends during the window.
        workers = CpuSampler(lambda: children(options.server_pid))
        backends = CpuSampler(lambda: pg_snapshot(db_url, options.database)[1])
        sampling = asyncio.Event()
        load_before = os.getloadavg()[0]
        workers.sample()
        backends.sample()
        t0, cpu0, beats0, lat0, errors0, queries0, commits0 = mark()
        samplers = [asyncio.create_task(sampler.run(sampling)) for sampler in (workers, backends)]
        await asyncio.sleep(options.duration)
        t1, cpu1, beats1, lat1, errors1, queries1, commits1 = mark()
        sampling.set()
        await asyncio.gather(*samplers)
        workers.sample()
        backends.sample()
        server_cpu, db_cpu = workers.seconds(), backends.seconds()
        load_after = os.getloadavg()[0]
        status = fleet.status_line()
    finally:
        fleet.stop()
        await running

    latencies = fleet.stats.latencies[lat0:lat1]
    histogram = queries1 - queries0
    counted = sum(histogram.values())
    heartbeats = beats1 - beats0
    return {
        "agents": len(nodes),
        "joined": joined,
        "interval": interval,
        "duration": t1 - t0,
        "heartbeats": heartbeats,
        "rate": heartbeats / (t1 - t0),
        "offered": len(nodes) / interval,
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "errors": errors1 - errors0,
        "errors_by_kind": dict(fleet.stats.errors_by_kind),
        "queries_per_heartbeat": sum(k * v for k, v in histogram.items()) / counted if counted else float("nan"),
        "query_histogram": dict(sorted(histogram.items())),
        "commits_per_heartbeat": (commits1 - commits0) / heartbeats if heartbeats else float("nan"),
        "client_cpu": (cpu1 - cpu0) / (t1 - t0),
        "client_ms": 1000 * (cpu1 - cpu0) / heartbeats if heartbeats else float("nan"),
        "server_ms": 1000 * server_cpu / heartbeats if heartbeats else float("nan"),
        "db_ms": 1000 * db_cpu / heartbeats if heartbeats else float("nan"),
        "load": (load_before, load_after),
        "status": status,
    }


async def measure(options: argparse.Namespace, base_url: str, api_key: str, db_url: str, query_dir: Path) -> dict:
    import simulator

    started = time.monotonic()
    nodes = await simulator.enroll(
        base_url, api_key, options.agents, pools=["bench-a", "bench-b"], create_pools=True, name_prefix="bench-"
    )
    enrolled = time.monotonic() - started
    phases = []
    for interval in options.heartbeat_seconds:
        print(f"  {len(nodes)} agents at {interval:g} s: warming up, then measuring {options.duration:g} s")
        phases.append(await measure_phase(options, interval, base_url, nodes, db_url, query_dir))
    return {"enroll_seconds": enrolled, "phases": phases}


def print_table(result: dict, options: argparse.Namespace) -> None:
    print(
        f"\n{options.agents} agents; gunicorn -w {options.workers} -k gthread --threads {options.threads};"
        f" PostgreSQL; {os.cpu_count()} cores shared by client, server and database;"
        f" {options.agents} nodes enrolled in {result['enroll_seconds']:.1f} s\n"
    )
    header = (
        "| interval | offered hb/s | sustained hb/s | p50 | p99 | errors | SQL / heartbeat"
        " | commits / heartbeat | CPU ms / heartbeat: gunicorn + PostgreSQL (client) | load avg |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for phase in result["phases"]:
        print(
            f"| {phase['interval']:g} s | {phase['offered']:.0f} | {phase['rate']:.1f} |"
            f" {phase['p50_ms']:.1f} ms | {phase['p99_ms']:.1f} ms | {phase['errors']} |"
            f" {phase['queries_per_heartbeat']:.2f} | {phase['commits_per_heartbeat']:.2f} |"
            f" {phase['server_ms']:.2f} + {phase['db_ms']:.2f} ({phase['client_ms']:.2f}) |"
            f" {phase['load'][0]:.1f} -> {phase['load'][1]:.1f} |"
        )
    print()
    for phase in result["phases"]:
        print(
            f"{phase['interval']:g} s: {phase['joined']} joined; {phase['heartbeats']} heartbeats in"
            f" {phase['duration']:.1f} s; statements per request {json.dumps(phase['query_histogram'])};"
            f" client CPU {100 * phase['client_cpu']:.0f}%;"
            f" errors {phase['errors_by_kind'] or 0}"
        )
        print(f"    last status: {phase['status']}")
    print(
        "\nSQL / heartbeat: statements each POST agent/session ran, counted in the server"
        " (connection.execute_wrapper). commits / heartbeat: pg_stat_database.xact_commit delta"
        " (autocommit: one per statement). Latency: client side, send to response, including the"
        " wait for one of the client's pooled connections. CPU ms / heartbeat: utime+stime (/proc, sampled"
        " every 0.5 s) of gunicorn's workers and of the database's backends over the window; the client's"
        " in parentheses. With other load on the machine, throughput and latency move; CPU per heartbeat"
        " much less: 2 cores / (gunicorn + PostgreSQL ms) bounds heartbeats/s with the client elsewhere."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="1,000 simulated agents' heartbeats against gunicorn + PostgreSQL")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument(
        "--heartbeat-seconds",
        type=lambda value: [float(item) for item in value.split(",")],
        default=[10.0, 2.0],
        help="comma-separated intervals, one measured phase each (default 10,2: the real interval, then 5x)",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds measured after the warm-up")
    parser.add_argument("--warmup", type=float, default=60.0, help="at most this long for every agent to join")
    parser.add_argument("--max-connections", type=int, help="client connection pool (default: one per agent)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--database", default="rollout_bench", help="dedicated database, dropped and recreated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    options = parser.parse_args(argv)

    base = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    db_url, admin_url = database_urls(base, options.database)
    if urlsplit(db_url).hostname not in {"127.0.0.1", "localhost", "::1"}:
        raise SystemExit("the benchmark runs on loopback only")
    work = Path(tempfile.mkdtemp(prefix="bench-heartbeats-"))
    query_dir = work / "queries"
    query_dir.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DATABASE_CONN_MAX_AGE": "60",
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        # Agents at 2 s against the default 10 s interval send the default limit's 5 per interval exactly:
        # jitter must not turn the measurement into one of 429s (docs/operations.md#request-limits).
        "AGENT_TOKEN_RATE": "25/heartbeat",
        "ROLLOUT_RUN_DIR": str(work / "run"),
        QUERY_DIR_ENV: str(query_dir),
        "PYTHONPATH": str(ROOT),
    }
    print(f"database {options.database}: recreate and migrate")
    recreate_database(admin_url, options.database)
    manage(env, "migrate", "--noinput")
    manage(env, "createtenant", "bench")
    api_key = manage(env, "createapikey", "--tenant", "bench", "--user", "bench", "--grant", "compute:fleet:admin")
    api_key = api_key.strip().splitlines()[-1]

    port = free_port()
    log = work / "gunicorn.log"
    command = [
        str(ROOT / ".venv/bin/gunicorn"),
        "benchmarks.heartbeat_probes:counting_application()",
        "-w",
        str(options.workers),
        "-k",
        "gthread",
        "--threads",
        str(options.threads),
        "-b",
        f"127.0.0.1:{port}",
        # Longer than the client's 5 s keep-alive expiry, so the server never closes a connection
        # the client is about to reuse.
        "--keep-alive",
        "10",
        "--timeout",
        "60",
    ]
    print(f"gunicorn on 127.0.0.1:{port} ({options.workers} workers x {options.threads} threads)")
    with log.open("w") as log_file:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_http(base_url + "/api/compute/pools/", 60, server, log)
        options.server_pid = server.pid
        result = asyncio.run(measure(options, base_url, api_key, db_url, query_dir))
    finally:
        stop_process(server)
    shutil.rmtree(work, ignore_errors=True)  # kept when anything above failed: gunicorn.log is there
    print_table(result, options)
    if options.json:
        print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
