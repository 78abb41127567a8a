"""Rollout efficiency: how close a real rollout gets to the fastest the budget and restart delay allow.

The whole system runs as in production, on this machine: gunicorn, a Celery
worker and beat (ticking every 30 s, the default) on PostgreSQL and Redis,
and N simulated agents over HTTP. A rollout of a release to every node is
timed from creation to completion and compared with its minimum:

    minimum = sum over waves of  max over pools of  ceil(nodes of the pool in the wave / pool budget) * restart delay

that is, every budget slot always busy and each node taking exactly its
restart delay. A controller that only acted on its 30 s period would need about
30 s per round; the settle-then-tick path is what brings it near the minimum.

    python -m benchmarks efficiency [--agents 1000] [--restart-delay 10] [--quick]

Downloads: each agent fetches its own bytes (the simulator's default, not ``shared_downloads``), a
40 KiB binary streamed by gunicorn (ROLLOUT_DOWNLOADS_OFFLOAD=none): the numbers are the control
plane's; delivery at fleet scale is ``benchmarks/delivery.py``.

``run()`` is parameterised: ``benchmarks/fleet10k.py`` runs the same harness with
10,000 agents and asks it to ``measure`` more (heartbeat rate and latency during
the rollout, 5xx, peak RSS of the worker and web processes).
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections import Counter
from collections.abc import Sequence

from benchmarks.bench_tier import bench_tier
from benchmarks.bench_world import arrivals_by_read, bench_world, memory_share
from benchmarks.heartbeat_probes import ProcessSampler, agent_errors, percentile
from benchmarks.polling_price import (
    IDLE_AT_SPEED,
    idle_at_speed,
    idle_rows,
    idle_window,
    requests_sent,
    upgrade_rows,
    web_cpu_per_download,
    web_cpu_per_heartbeat,
)
from benchmarks.speed_probe import SpeedProbe

BENCH_DB = "rollout_bench_efficiency"
DOWNLOADS = "/api/compute/downloads/bcd"


def minimum_seconds(*, rounds: Sequence[int], restart_delay: float, soak: float) -> float:
    """The budget's physical minimum: every slot always busy, each node taking its restart delay, plus the soaks."""
    return sum(rounds) * restart_delay + soak * (len(rounds) - 1)


def run(
    *,
    agents: int,
    pools: int,
    budget: float,
    restart_delay: float,
    heartbeat: float,
    timeout: float,
    waves: Sequence[int] = (1, 10, 50, 100),
    soak: float = 0,
    bench_db: str = BENCH_DB,
    web_workers: int = 3,
    web_threads: int = 8,
    worker_concurrency: int = 4,
    measure: bool = False,
    progress: bool = False,
    start_spread: float | None = None,
    simulator_processes: int = 1,
    watch: bool = False,
    idle_seconds: float = 0,
    addresses: int = 1,
    rollout: bool = True,
    nginx: bool = False,
) -> dict:
    """One rollout over ``agents`` simulated agents, whole system; the rows to print (name -> value).

    With ``measure``: also the heartbeat rate, latency (p50/p99) and errors during the
    rollout, the agents' 5xx answers, and the peak RSS of the Celery worker and gunicorn.
    The agents run in ``simulator_processes`` child processes (``simulator.ShardedFleet``); with ``watch`` they
    hold their session requests (``--watch``). ``measure`` also prices polling: before the rollout, a closed loop of
    plain heartbeats gives the web tier's CPU per heartbeat, hence what polling every 10 s would cost.
    ``addresses``: loopback addresses the web tier listens on, the simulator's processes spread over them (one
    source address reaches one server address over at most ~64,000 ephemeral ports). Without ``rollout``: the
    idle fleet is measured (``idle_seconds``), and nothing is rolled out. ``nginx``: production's tier, nginx in front
    of gunicorn (benchmarks/bench_tier.py); the web CPU is still gunicorn's, nginx's is reported beside it.
    """
    world = bench_world(
        agents=agents, pools=pools, budget=budget, heartbeat=heartbeat, watch=watch, bench_db=bench_db,
        addresses=addresses, nginx=nginx,
    )  # fmt: skip
    env, port, listen, run_dir, tenant = world.env, world.port, world.listen, world.run_dir, world.tenant
    database_url, pool_rows, tokens = world.database_url, world.pools, world.tokens
    from demo.processes import celery_beat, celery_worker, stop, wait_until
    from rollout.models import NodeUpgrade, Rollout
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec
    from simulator import ShardedFleet, build_agent_configs

    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    tier = bench_tier(
        env, port=port, workers=web_workers, threads=web_threads, logs=logs, addresses=listen,
        nginx_run_dir=run_dir / "tier" if nginx else None,
    )  # fmt: skip
    web = tier.gunicorn
    worker = celery_worker(
        env, queue=env["CELERY_TASK_DEFAULT_QUEUE"], concurrency=worker_concurrency, log_path=logs / "worker.log"
    )
    beat = celery_beat(env, log_path=logs / "beat.log")
    roots = {
        "worker": worker.pid,
        "web": web.pid,
        "beat": beat.pid,
        **({"nginx": tier.nginx.pid} if tier.nginx else {}),
    }
    fleet: ShardedFleet | None = None
    probe = SpeedProbe() if measure and watch else None  # how fast the machine ran in each measured window
    sampler = (
        ProcessSampler(
            roots,
            database_url=database_url,
            database=bench_db,
            simulator_pids=lambda: fleet.pids if fleet else [],
        )
        if measure
        else None
    )
    try:
        import httpx

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/compute/releases/", timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        wait_until(answers, timeout=60, what="gunicorn")
        configs = build_agent_configs(tokens, daemon_version="1.0.0")
        fleet = ShardedFleet(
            [f"http://{address}:{port}" for address in listen],
            configs,
            processes=simulator_processes,
            release_pins=[env["ROLLOUT_RELEASE_PINS"]],  # agents verify every release they run
            heartbeat_seconds=heartbeat,
            restart_delay=restart_delay,
            seed=3,
            record_latencies=measure,
            start_spread=start_spread,
            shared_downloads=False,  # each agent downloads its own (small) binary, as nodes do
            watch=watch,
        )
        online_timeout = 120 + 2 * max(heartbeat, start_spread or 0)
        with fleet.start(timeout=online_timeout + timeout + 120):
            if not fleet.wait_for(lambda f: f.online_count() == agents, timeout=online_timeout, poll=0.5):
                raise SystemExit(f"only {fleet.online_count()} of {agents} agents came online: {fleet.status_line()}")
            # Priced while the agents watch (idle); polling agents would add their own heartbeats to it.
            heartbeat_loop = web_cpu_per_heartbeat(web.pid, port, tokens) if measure and watch else None
            # The same, priced as before 2026-12-06 (the 16 connections sending at once): printed beside it.
            burst_loop = web_cpu_per_heartbeat(web.pid, port, tokens, bursts=True) if measure and watch else None
            # A download of the release the rollout sends, priced the same way, before the measured windows.
            download_loop = (
                web_cpu_per_download(web.pid, port, f"{DOWNLOADS}/1.1.0/linux-amd64", rate=agents / 10)
                if measure and watch
                else None
            )
            arrivals = [arrivals_by_read(port)] if watch else []
            if sampler and not rollout:
                sampler.start()
            nginx_pid, sent = tier.nginx.pid if tier.nginx else None, lambda: requests_sent(fleet.stats)
            # A measured window: every agent online, nothing changing.
            before = idle_window(web_pid=web.pid, nginx_pid=nginx_pid, sent=sent, seconds=idle_seconds)
            arrivals += [arrivals_by_read(port)] if watch else []
            # The loops ran beside the watching fleet: its CPU at the idle window's rate comes out of their
            # price, as it comes out of the upgrade's (polling_price.upgrade_price).
            idle_rate = before.cpu / before.seconds if idle_seconds else 0.0
            per_heartbeat = heartbeat_loop.per_request(idle_rate) if heartbeat_loop else 0.0
            idle_speed = (
                idle_at_speed(agents=agents, idle=before, heartbeat=heartbeat_loop, probe=probe)
                if heartbeat_loop and probe and idle_seconds
                else None
            )
            if not rollout:
                return idle_rows(
                    agents=agents, idle_seconds=idle_seconds, idle_cpu=before.cpu, per_heartbeat=per_heartbeat,
                    fleet=fleet, sampler=sampler, heartbeat=heartbeat, at_speed=idle_speed,
                )  # fmt: skip
            if sampler:
                sampler.start()
            beats_before, requests_before, latencies_before, round_trips_before, errors_before = (
                fleet.stats.heartbeats,
                requests_sent(fleet.stats),
                len(fleet.stats.latencies),
                len(fleet.stats.round_trips),
                fleet.stats.errors,
            )
            started = time.monotonic()
            rollout = rollout_create(
                tenant=tenant,
                spec=rollout_spec(
                    version="1.1.0", waves=list(waves), soak_seconds=int(soak), upgrade_timeout_seconds=300
                ),
            )
            last_status = [started]

            def completed() -> bool:
                if progress and time.monotonic() - last_status[0] >= 30:
                    last_status[0] = time.monotonic()
                    print(f"  {fleet.status_line()}", flush=True)
                return Rollout.objects.get(pk=rollout.id).state == "completed"

            wait_until(completed, timeout=timeout, poll=1.0 if measure else 0.5, what="the rollout to complete")
            window = time.monotonic() - started
            rollout.refresh_from_db()
            stats = fleet.stats
            beats = stats.heartbeats - beats_before
            requests_during = requests_sent(stats) - requests_before
            latencies = stats.latencies[latencies_before:]
            round_trips = stats.round_trips[round_trips_before:]
            errors_during = stats.errors - errors_before
            arrivals += [arrivals_by_read(port)] if watch else []
            if sampler:
                sampler.stop()  # the rollout's CPU ends here
            # The idle fleet again, on the new version: the upgrades' share is what the rollout cost beyond both
            # windows' rate, which a drift of the machine or the fleet over the run moves less than either's.
            after = (
                idle_window(web_pid=web.pid, nginx_pid=nginx_pid, sent=sent, seconds=idle_seconds)
                if measure and watch and idle_seconds
                else None
            )
    finally:
        stop(worker, beat)  # first: nothing may leave them running
        if probe:
            probe.stop()
        tier.stop()
        if sampler:
            sampler.stop()

    actual = (rollout.completed_at - rollout.created_at).total_seconds()
    allowed = {pool.id: math.ceil(budget * agents / pools - 1e-9) for pool in pool_rows}
    per_wave_pool = Counter(NodeUpgrade.objects.filter(rollout=rollout).values_list("wave", "pool_id"))
    wave_indexes = sorted({wave for wave, _ in per_wave_pool})
    rounds = [
        max(math.ceil(n / allowed[p]) for (w, p), n in per_wave_pool.items() if w == wave) for wave in wave_indexes
    ]
    minimum = minimum_seconds(rounds=rounds, restart_delay=restart_delay, soak=soak)
    states = Counter(NodeUpgrade.objects.filter(rollout=rollout).values_list("state", flat=True))
    result = {
        "agents": f"{agents:,}",
        "pools": str(pools),
        "budget per pool": f"{budget:.0%} = {next(iter(allowed.values()))} nodes",
        "waves": " / ".join(map(str, waves)) + f" %, soak {soak:g} s",
        "restart delay": f"{restart_delay:g} s",
        "heartbeat": f"{heartbeat:g} s (server FLEET_HEARTBEAT_SECONDS={env['FLEET_HEARTBEAT_SECONDS']})",
        "rounds (per wave)": " + ".join(map(str, rounds)),
        "minimum": f"{minimum:.1f} s",
        "actual": f"{actual:.1f} s",
        "actual / minimum": f"{actual / minimum:.2f}" + ("" if measure else "  (target <= 1.3)"),
        "nodes": ", ".join(f"{k} {v}" for k, v in sorted(states.items())),
        "heartbeats sent": f"{stats.heartbeats:,}",
    }
    if measure:
        # An agent sees its new spec.daemon at its next heartbeat: about half an interval per round.
        reference = minimum + sum(rounds) * heartbeat / 2
        server_errors, kinds = agent_errors(stats)
        assert sampler is not None
        agent_minutes = agents * window / 60 / 1000
        web_cpu = sampler.cpu["web"].seconds() / agent_minutes
        polling = per_heartbeat * 6 * 1000  # every 10 s: 6 heartbeats per agent-minute
        priced = f"polling every 10 s: {polling:.2f}, {1000 * per_heartbeat:.2f} ms a heartbeat at {agents // 10}/s"

        def against_polling(value: float) -> str:
            return f"{value:.2f} ({priced}; ratio {value / polling:.2f})" if watch else f"{value:.2f}"

        if idle_seconds:
            idle = before.cpu / (agents * before.seconds / 60 / 1000)
            result[f"web CPU s per 1,000 agent-minutes, idle ({idle_seconds:g} s)"] = against_polling(idle)
            if idle_speed:
                result[IDLE_AT_SPEED] = idle_speed
            if watch and states["succeeded"] and after:
                idle_windows = (before, after)
                measured = {
                    "rollout_cpu": sampler.cpu["web"].seconds(), "window": window,
                    "idle_cpu": before.cpu + after.cpu, "idle_seconds": before.seconds + after.seconds,
                    "rollout_requests": requests_during, "idle_requests": before.requests + after.requests,
                    "upgraded": states["succeeded"],
                }  # fmt: skip
                assert heartbeat_loop is not None
                assert burst_loop is not None
                assert download_loop is not None
                assert probe is not None
                result |= upgrade_rows(
                    measured, rollout_window=(started, started + window), idle=idle_windows, probe=probe,
                    heartbeat=heartbeat_loop, bursts=burst_loop, download=download_loop,
                )  # fmt: skip
                if "nginx" in sampler.cpu:
                    idle_nginx = (before.nginx_cpu + after.nginx_cpu) / measured["idle_seconds"]
                    nginx_cpu = sampler.cpu["nginx"].seconds() - idle_nginx * window
                    result["nginx CPU per upgraded node (idle share out)"] = (
                        f"{1000 * nginx_cpu / states['succeeded']:.2f} ms (not in the ratio: gunicorn's only)"
                    )
        if len(arrivals) == 3:
            result["held arrivals answered from memory, idle / rollout"] = " / ".join(
                memory_share(before, after) for before, after in itertools.pairwise(arrivals)
            )
            # Every process reads every notification of the shared channel, and its own channel's (fleet/watch/hub.py).
            read = arrivals[2].get("notifications", 0) - arrivals[1].get("notifications", 0)
            per_node = read / max(states["succeeded"], 1)
            result["watch notifications read by the web tier per upgraded node"] = f"{per_node:.2f}"
        if not watch:
            result["minimum + half a heartbeat per round"] = (
                f"{reference:.1f} s (actual / that: {actual / reference:.2f})"
            )
        result.update(
            {
                "web CPU s per 1,000 agent-minutes, rollout": against_polling(web_cpu),
                "heartbeats/s during the rollout": f"{beats / window:.0f} (offered {agents / heartbeat:.0f})",
                "heartbeat round trip p50 / p99": (
                    f"{1000 * percentile(round_trips, 0.5):.0f} ms / {1000 * percentile(round_trips, 0.99):.0f} ms"
                ),
                "  as the agent sees it (with its wait for a connection)": (
                    f"{1000 * percentile(latencies, 0.5):.0f} ms / {1000 * percentile(latencies, 0.99):.0f} ms"
                ),
                "5xx answers": str(server_errors),
                "agent errors": f"{stats.errors} (during the rollout {errors_during}; {kinds})",
                "peak RSS, Celery worker": f"{sampler.peak_kib['worker'] / 1024:.0f} MiB",
                "peak RSS, gunicorn (all)": f"{sampler.peak_kib['web'] / 1024:.0f} MiB",
                "CPU during the rollout (cores)": ", ".join(
                    f"{name} {cpu.seconds() / window:.2f}" for name, cpu in sampler.cpu.items()
                ),
            }
        )
        result["_failed"] = bool(server_errors or stats.errors or states.keys() - {"succeeded"})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks efficiency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    # 1,000 agents heartbeating every 10 s are 100 heartbeats/s: well inside what one
    # 2-core machine serves (docs/simulator.md), so the server is not the bottleneck.
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--budget", type=float, default=0.2)
    parser.add_argument("--restart-delay", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--quick", action="store_true", help="200 agents in 4 pools, 10 s restarts, 2 s heartbeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.pools, args.restart_delay, args.heartbeat = 200, 4, 10.0, 2.0
    result = run(
        agents=args.agents,
        pools=args.pools,
        budget=args.budget,
        restart_delay=args.restart_delay,
        heartbeat=args.heartbeat,
        timeout=args.timeout,
    )
    print_result("rollout efficiency (whole system, PostgreSQL + Redis, beat every 30 s)", result)
    return 0


def print_result(title: str, result: dict) -> None:
    rows = {name: value for name, value in result.items() if not name.startswith("_")}
    width = max(map(len, rows))
    print(title)
    for name, value in rows.items():
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    raise SystemExit(main())
