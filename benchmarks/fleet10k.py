"""A whole rollout over 10,000 simulated agents on this machine (docs/architecture.md#scale-targets, end to end).

The efficiency benchmark's harness (``benchmarks/efficiency.py`` ``run``), larger: gunicorn, a
Celery worker and beat on PostgreSQL and Redis, 10,000 simulated agents (``simulator.ShardedFleet``:
two child processes of 5,000, one asyncio loop each) in 10 pools of 1,000 with a 5 % disruption
budget (50 nodes per pool at a time), a rollout of a new release with waves 1 / 10 / 50 / 100 %, a
short soak and short restarts. It prints the completion time and its ratio to the budget's physical
minimum, the heartbeats per second sustained during the rollout and their p50 / p99 latency (the
HTTP round trip, and as an agent sees it: with its wait for one of its process's 16 connections),
5xx answers and agent errors (both must be 0: the run fails otherwise), and the
peak RSS of the Celery worker and of gunicorn (sampled every second).

First beats (joins) are spread over max(heartbeat, agents / 100) seconds. Agents heartbeat every
30 s by default (333 heartbeats/s offered): 10 s (1,000/s) is more than one shared 2-core machine
serves while also running the simulator, PostgreSQL and the worker.

    python -m benchmarks fleet10k [--agents 10000] [--heartbeat 30] [--restart-delay 5] [--soak 10]

Downloads: per agent, as in the efficiency benchmark (each of the 10,000 fetches its own 40 KiB
binary from gunicorn; delivery at scale is ``benchmarks/delivery.py``). ``--nginx``: production's tier, nginx in
front of gunicorn, which hands each download to nginx (X-Accel-Redirect); the web CPU measured is still gunicorn's,
nginx's is printed beside it.

About 11 minutes (23 rounds of restart + heartbeat wait); the last of ``make bench``'s default
run, or alone: ``make bench ARGS=fleet10k``. ``--quick``: 2,000 agents, 6 s heartbeats.

Larger idle fleets: ``--idle-only`` measures the fleet online for ``--idle`` seconds and rolls nothing out;
``--addresses 2`` spreads the agents over two loopback addresses of the web tier (one source address
reaches one server address and port over at most ~64,000 ephemeral ports), ``--join-rate`` paces the
first joins (docs/benchmarks.md: 50,000 agents).
"""

from __future__ import annotations

import argparse

from benchmarks.efficiency import print_result, run

BENCH_DB = "rollout_bench_fleet10k"
QUICK_ARGV = ["--quick"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks fleet10k", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--budget", type=float, default=0.05)
    parser.add_argument("--restart-delay", type=float, default=5.0)
    parser.add_argument("--heartbeat", type=float, default=30.0)
    parser.add_argument("--soak", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for the rollout to complete")
    parser.add_argument("--web-workers", type=int, default=3)
    parser.add_argument("--web-threads", type=int, default=8)
    parser.add_argument(
        "--addresses", type=int, default=1,
        help="loopback addresses the web tier listens on (over ~60,000 agents: one address takes ~64,000)",
    )  # fmt: skip
    parser.add_argument("--join-rate", type=float, default=100.0, help="first joins a second, at most")
    parser.add_argument("--idle-only", action="store_true", help="measure the idle fleet (--idle s); no rollout")
    parser.add_argument(
        "--simulator-processes", type=int, default=2, help="processes the agents are split over (one event loop each)"
    )
    parser.add_argument(
        "--idle", type=float, default=60.0, help="seconds of an idle fleet measured before the rollout (web CPU)"
    )
    parser.add_argument(
        "--watch", action="store_true", help="agents hold their session requests (wait = --heartbeat, at most 60 s)"
    )
    parser.add_argument(
        "--nginx", action="store_true",
        help="production's tier: nginx in front of gunicorn, downloads handed to nginx (X-Accel-Redirect)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="2,000 agents, 6 s heartbeats (same offered rate)")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.heartbeat = 2_000, 6.0
    print(
        f"{args.agents:,} agents, heartbeat {args.heartbeat:g} s, restart {args.restart_delay:g} s, "
        f"soak {args.soak:g} s, {args.simulator_processes} simulator process(es)"
        + (", watching" if args.watch else "")
        + (", nginx in front" if args.nginx else "")
        + ": starting (several minutes)",
        flush=True,
    )
    result = run(
        agents=args.agents,
        pools=args.pools,
        budget=args.budget,
        restart_delay=args.restart_delay,
        heartbeat=args.heartbeat,
        timeout=args.timeout,
        soak=args.soak,
        bench_db=BENCH_DB,
        web_workers=args.web_workers,
        web_threads=args.web_threads,
        addresses=args.addresses,
        rollout=not args.idle_only,
        simulator_processes=args.simulator_processes,
        measure=True,
        progress=True,
        # Joins take the full path (DRF, session row, settle check): at most about 100 a second.
        start_spread=max(args.heartbeat, args.agents / args.join_rate),
        watch=args.watch,
        idle_seconds=args.idle,
        nginx=args.nginx,
    )
    mode = "watching" if args.watch else "polling"
    if args.idle_only:
        print_result(f"an idle fleet of {args.agents:,} simulated agents, {mode} (whole system)", result)
        return 1 if result["_failed"] else 0
    print_result(f"rollout over {args.agents:,} simulated agents, {mode} (whole system, PostgreSQL + Redis)", result)
    if args.watch:
        print(
            "targets (watching): actual / minimum <= 1.3; idle web CPU per 1,000 agent-minutes <= 0.3x polling at 10 s;"
            " web CPU per upgraded node <= 1.5x its requests priced as plain heartbeats"
        )
    if result["_failed"]:
        print("FAILED: 5xx answers, agent errors or nodes that did not succeed (all must be 0)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
