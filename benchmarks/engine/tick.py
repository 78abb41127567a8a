"""The tick benchmark: the first, a settling and a no-op ``rollout_tick`` at 1k-100k nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.engine.measuring import Sample, Series, measure, print_profile, table
from benchmarks.engine.setup import BUDGET, NEW, OLD, POOLS, heartbeat_all, make_fleet, vacuum_all


@dataclass
class TickResult:
    nodes: int
    started_per_tick: int
    first: Series
    settle: Series
    noop: Series


def reset_rollout(rollout: Any, pools: list) -> None:
    """Back to just-created: every row pending, spec.daemon unset, sessions on OLD; then vacuum."""
    from django.db import connection

    from fleet.models import Node, NodeSession
    from rollout.models import NodeUpgrade, TickRequest

    node_table, session_table = Node._meta.db_table, NodeSession._meta.db_table
    pool_ids = [pool.id for pool in pools]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {NodeUpgrade._meta.db_table} SET state = 'pending', claims_node = true, started_at = NULL,
                deadline = NULL, settled_at = NULL, reason = NULL, previous_daemon = NULL, previous_version = NULL
                WHERE rollout_id = %s AND state <> 'pending'""",  # noqa: S608
            [rollout.id],
        )
        cursor.execute(
            f"UPDATE {node_table} SET spec = spec - 'daemon' WHERE pool_id = ANY(%s) AND spec ? 'daemon'",  # noqa: S608
            [pool_ids],
        )
        cursor.execute(
            f"""UPDATE {session_table} s SET daemon_version = %s FROM {node_table} n
                WHERE s.node_id = n.id AND n.pool_id = ANY(%s) AND s.daemon_version <> %s""",  # noqa: S608
            [OLD, pool_ids, OLD],
        )
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    vacuum_all()


def report_target_version(rollout: Any) -> int:
    """The in-flight nodes' agents rejoin on the target version (their sessions say so)."""
    from fleet.models import NodeSession
    from rollout.models import NodeUpgrade

    in_flight = NodeUpgrade.objects.filter(rollout=rollout, state=NodeUpgrade.State.IN_FLIGHT).values("node_id")
    return NodeSession.objects.filter(node_id__in=in_flight).update(daemon_version=NEW)


def bench_tick(nodes: int, repeat: int, profile: bool, fleet: tuple[Any, list] | None = None) -> TickResult:
    """``fleet``: (tenant, pools) of ``nodes`` nodes to reuse (the create benchmark's), else a new one."""
    from fleet.services.budget import budget_allowed
    from rollout.controller.tick import rollout_tick
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec

    tenant, pools = fleet or make_fleet(f"tick-{nodes}", nodes)
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version=NEW, waves=[100], soak_seconds=0))
    from decimal import Decimal

    per_tick = sum(budget_allowed(budget=Decimal(BUDGET), nodes=pool.nodes.count()) for pool in pools)
    result = TickResult(nodes, per_tick, Series(), Series(), Series())

    def tick() -> Any:
        return rollout_tick(rollout_id=rollout.id)

    def expect(sample: Sample, what: str, **counts: int) -> None:
        got = {name: getattr(sample.value, name) for name in counts}
        if got != counts:
            raise RuntimeError(f"{nodes:,} nodes, {what} tick: {got}, expected {counts}")
        if sample.dropped:
            raise RuntimeError(f"{nodes:,} nodes, {what} tick: {sample.dropped} message(s) not published")

    for i in range(repeat):
        if i:
            reset_rollout(rollout, pools)
        else:
            vacuum_all()
        heartbeat_all()
        expect(result.first.add(measure(tick)), "first", started=per_tick, succeeded=0)
    for _ in range(repeat):
        report_target_version(rollout)
        heartbeat_all()
        expect(result.settle.add(measure(tick)), "settle", succeeded=per_tick, started=per_tick)
        expect(result.noop.add(measure(tick)), "no-op", succeeded=0, started=0, failed=0)
    if profile:
        report_target_version(rollout)
        heartbeat_all()
        print_profile(f"settle tick, {nodes:,} nodes", tick)
    return result


def tick_table(results: list[TickResult], repeat: int) -> str:
    rows = []
    for result in results:
        for name, series in (("first", result.first), ("settle", result.settle), ("no-op", result.noop)):
            seconds = series.median("seconds")
            sql = series.median("sql_seconds")
            hooks = series.median("commit_hooks_seconds")
            started = result.started_per_tick if name != "no-op" else 0
            rows.append(
                [
                    f"{result.nodes:,} nodes, {name}",
                    str(started),
                    f"{seconds:.3f}",
                    series.spread(),
                    f"{series.median('queries'):.0f}",
                    f"{sql:.3f}",
                    f"{series.python_median():.3f}",
                    f"{series.median('messages'):.0f}",
                    f"{hooks:.3f}",
                    f"{1000 * seconds / started:.2f}" if started else "-",
                ]
            )
    headers = [
        "tick",
        "started",
        "seconds",
        "min-max",
        "queries",
        "sql s",
        "python s",
        "messages",
        "on-commit s",
        "ms/started",
    ]
    title = f"tick: one rollout_tick, {POOLS} pools, budget {float(BUDGET):.0%} per pool, one wave (median of {repeat})"
    legend = (
        "first: starts the first 5 %; settle: after the in-flight nodes' sessions report the target version,\n"
        "settles them and starts the next 5 %; no-op: nothing to settle or start. sql s: time in SQL statements\n"
        "(CaptureQueriesContext); messages / on-commit s: Celery messages rollout.dispatch.publish sent to the\n"
        "broker on commit (one rollout/timeouts-due per tick that starts nodes, tick requests) and the time that\n"
        "took; python s: the rest."
    )
    largest = max(results, key=lambda r: r.nodes)
    headline = (
        f"tick that starts {largest.started_per_tick:,} nodes of {largest.nodes:,}: "
        f"{largest.first.median('seconds'):.3f} s (first), {largest.settle.median('seconds'):.3f} s (settle); "
        "target <= 1.5 s at 100,000\n"
        f"messages per tick (first / settle / no-op), by fleet size: "
        + ", ".join(
            f"{r.nodes:,}: {r.first.median('messages'):.0f} / {r.settle.median('messages'):.0f} / "
            f"{r.noop.median('messages'):.0f}"
            for r in results
        )
        + "\nqueries of a no-op tick, by fleet size: "
        + ", ".join(f"{r.nodes:,}: {r.noop.median('queries'):.0f}" for r in results)
    )
    return f"{title}\n\n{table(headers, rows)}\n{legend}\n\n{headline}"
