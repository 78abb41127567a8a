"""A reconnect storm: a whole watching fleet rejoining at once after a restart of the web tier.

    python -m benchmarks reconnect [--agents 10000] [--down 10] [--workers 3] [--simulator-processes 2]

The tier is ``make web``'s (demo/web.py: nginx in front of gunicorn's uvicorn workers), on a database of ``--agents``
nodes, ``FLEET_HEARTBEAT_SECONDS`` 60. Two runs, one after the other on the same database (``--only`` runs one):

- ``admission``: the tier as shipped (``WEB_SESSIONS_IN_PROGRESS`` at its default, docs/operations.md#admission-control)
  and agents retrying as the agent protocol says (docs/fleet.md#retries);
- ``no-admission``: ``WEB_SESSIONS_IN_PROGRESS=0`` and the simulator's retries before that rule (``--fixed-retry``:
  a failed call waits its whole interval), today's behaviour before this change.

Each run: (1) the tier's full speed: every session is closed, then ``--agents`` joins are sent by a closed loop of 24
keep-alive connections through nginx: the time the tier needs to serve that many joins; (2) ``--agents`` watching
simulated agents join and hold (``simulator.ShardedFleet``); (3) gunicorn is SIGTERMed (nginx stays: it answers 503
``unavailable`` meanwhile), started again ``--down`` seconds later; (4) measured until every agent is held again
(the tier's ``fleet_watch_held``): that time from the restart, against the full-speed time; the agents' timeouts;
their answers by status, from the SIGTERM on; the tier's CPU seconds from its restart to all held. Target: every
agent back within 2x the full-speed time, no agent timeout, no 5xx but the deliberate 503s.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.database import database_urls, recreate_database  # noqa: E402 - after the path fix-up
from benchmarks.heartbeat_floor import REAL_PATH, VERSION, create_fleet, request_bytes  # noqa: E402
from benchmarks.heartbeat_probes import ProcessSampler, cpu_ticks  # noqa: E402
from benchmarks.heartbeats import manage  # noqa: E402
from benchmarks.watch import held_gauge  # noqa: E402
from demo.processes import free_port, stop  # noqa: E402
from demo.web import start as start_web_tier  # noqa: E402

QUICK_ARGV = ["--agents", "2000", "--down", "5"]
RUNS = ("admission", "no-admission")


async def joins_at_full_speed(port: int, tokens: list[str], connections: int = 24) -> tuple[float, Counter]:
    """Each token's session request once, ``connections`` at a time: (seconds, answers by status)."""
    pending = [request_bytes(REAL_PATH, token, port) for token in tokens]
    statuses: Counter = Counter()

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while pending:
                writer.write(pending.pop())
                head = await reader.readuntil(b"\r\n\r\n")
                statuses[int(head.split(b" ", 2)[1])] += 1
                length = next(int(line[15:]) for line in head.split(b"\r\n") if line[:15].lower() == b"content-length:")
                await reader.readexactly(length)
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return time.monotonic() - started, statuses


def close_sessions(db_url: str) -> None:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE fleet_nodesession SET left_at = now()")


def held_now(port: int) -> int:
    """The tier's held requests; 0 while its /metrics does not answer (gunicorn starting, or swamped)."""
    try:
        return held_gauge(port)
    except Exception:  # httpx's errors, nginx's 503 page
        return 0


def tier_cpu_seconds(pid: int) -> float:
    ticks = sum(cpu_ticks(child) or 0 for child in ProcessSampler.tree(pid))
    return ticks / os.sysconf("SC_CLK_TCK")


def one_run(name: str, options: argparse.Namespace, env: dict, db_url: str, tokens: list[str], work: Path) -> dict:
    from simulator import AgentConfig, ShardedFleet

    admission = name == "admission"
    env = {**env, "WEB_WORKERS": str(options.workers), **({} if admission else {"WEB_SESSIONS_IN_PROGRESS": "0"})}
    port = free_port()
    tier = start_web_tier(env, port=port, media_root=work / "media", run_dir=work / "run" / name, log_dir=work)
    result: dict = {"run": name}
    try:
        close_sessions(db_url)
        full, statuses = asyncio.run(joins_at_full_speed(port, tokens))
        if set(statuses) != {200}:
            raise SystemExit(f"{name}: the full-speed joins were answered {dict(statuses)}")
        result["full_speed"] = full
        print(f"{name}: {len(tokens):,} joins at full speed in {full:.1f} s ({len(tokens) / full:.0f}/s)", flush=True)
        configs = [AgentConfig(token=token, name=f"a-{n}", daemon_version=VERSION) for n, token in enumerate(tokens)]
        fleet = ShardedFleet(
            tier.url,
            configs,
            processes=options.simulator_processes,
            watch=True,
            start_spread=len(tokens) / options.join_rate,
            retry="backoff" if admission else "fixed",
        ).start(timeout=3600)
        with fleet:
            deadline = time.monotonic() + 600
            while held_now(port) < len(tokens):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: only {held_now(port)} of {len(tokens)} held before the restart")
                time.sleep(0.5)
            before = Counter(fleet.stats.answers)
            errors_before = Counter(fleet.stats.errors_by_kind)
            print(f"{name}: {len(tokens):,} agents held; SIGTERM to gunicorn for {options.down:g} s", flush=True)
            stop(tier.processes["gunicorn"])
            time.sleep(options.down)  # the outage being measured, not a synchronisation
            tier.processes["gunicorn"] = tier.spawns["gunicorn"]()
            restarted = time.monotonic()
            deadline = restarted + 600
            held = 0
            while held < len(tokens) and time.monotonic() < deadline:
                time.sleep(0.25)
                held = held_now(port)
            result["back"] = time.monotonic() - restarted
            result["held"] = held
            result["cpu"] = tier_cpu_seconds(tier.processes["gunicorn"].pid)
            time.sleep(1)  # one more report from the simulator's processes
            result["answers"] = Counter(fleet.stats.answers) - before
            errors = Counter(fleet.stats.errors_by_kind) - errors_before
            result["timeouts"] = sum(count for kind, count in errors.items() if "Timeout" in kind)
            result["errors"] = errors
            print(f"{name}: {result}", flush=True)
    finally:
        tier.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks reconnect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--down", type=float, default=10.0, help="seconds gunicorn stays down")
    parser.add_argument("--workers", type=int, default=3, help="web processes (WEB_WORKERS)")
    parser.add_argument("--simulator-processes", type=int, default=2)
    parser.add_argument("--join-rate", type=float, default=500.0, help="first joins a second, before the restart")
    parser.add_argument("--only", choices=RUNS, help="one run instead of both")
    parser.add_argument("--database", default="rollout_bench_reconnect")
    options = parser.parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    db_url, admin_url = database_urls(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout"), options.database
    )
    work = Path(tempfile.mkdtemp(prefix="bench-reconnect-"))
    work.chmod(0o755)  # nginx's workers (nobody, when run as root) reach gunicorn's socket
    (work / "prometheus").mkdir()
    (work / "media").mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DATABASE_CONN_MAX_AGE": "60",
        "LOG_LEVEL": "WARNING",
        "FLEET_HEARTBEAT_SECONDS": "60",
        "AGENT_TOKEN_RATE": "10/heartbeat",  # docs/operations.md#request-limits: what watching fleets at 60 s set
        "METRICS_PUBLIC": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
        "PYTHONPATH": str(ROOT),
    }
    recreate_database(admin_url, options.database)
    manage(env, "migrate", "--noinput")
    tokens = create_fleet(db_url, options.agents)
    results = [one_run(name, options, env, db_url, tokens, work) for name in ([options.only] if options.only else RUNS)]

    print(f"\n{options.agents:,} watching agents, gunicorn down {options.down:g} s, {options.workers} web processes")
    print(
        f"{'run':<14} {'full speed':>10} {'all back':>9} {'ratio':>6} {'timeouts':>8} {'web CPU':>8}  answers by status"
    )
    failed = False
    for r in results:
        ratio = r["back"] / r["full_speed"]
        answers = " ".join(f"{status}={count}" for status, count in sorted(r["answers"].items()))
        print(
            f"{r['run']:<14} {r['full_speed']:>9.1f}s {r['back']:>8.1f}s {ratio:>5.2f}x {r['timeouts']:>8}"
            f" {r['cpu']:>7.1f}s  {answers}"
        )
        if r["held"] < options.agents:
            print(f"  {r['run']}: only {r['held']:,} held again at the deadline")
        others = {kind: count for kind, count in r["errors"].items() if "Timeout" not in kind}
        if others:
            print(f"  {r['run']}: agent errors {dict(others)}")
        if r["run"] == "admission":
            server_errors = sum(count for status, count in r["answers"].items() if status >= 500 and status != 503)
            failed = failed or r["timeouts"] > 0 or server_errors > 0 or ratio > 2
    print("targets (admission): all back within 2x the full-speed time, 0 agent timeouts, no 5xx but 503s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
