"""The create benchmark: ``rollout_create`` against the raw INSERT ... SELECT and a COPY from Python."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from benchmarks.engine.measuring import Series, measure, print_profile, table
from benchmarks.engine.setup import NEW, POOLS, drop_rollout, make_fleet, vacuum_all

UPGRADE_COLUMNS = ("rollout_id", "node_id", "pool_id", "wave", "position", "state", "claims_node", "target_version")


def bare_rollout(tenant: Any, pools: list) -> Any:
    """A rollout row without node rows (for the raw and COPY writers)."""
    from django.utils import timezone

    from rollout.models import Release, Rollout
    from rollout.rollouts.spec import DEFAULT_WAVES

    rollout = Rollout.objects.create(
        tenant=tenant,
        release=Release.objects.get(version=NEW),
        waves=list(DEFAULT_WAVES),
        max_failure_ratio="0.1",
        soak_seconds=300,
        upgrade_timeout_seconds=600,
        state=Rollout.State.ACTIVE,
        current_wave=0,
        created_at=timezone.now(),
    )
    rollout.pools.set(pools)
    return rollout


def raw_insert_select(rollout: Any, pools: list, nodes: int) -> int:
    """The NodeUpgrade rows of ``rollout`` in one INSERT ... SELECT (shuffle and waves in SQL), committed."""
    from django.db import connection, transaction

    from fleet.models import Node
    from rollout.models import NodeUpgrade
    from rollout.rollouts.spec import DEFAULT_WAVES, planned_waves

    waves = planned_waves(DEFAULT_WAVES, nodes)
    starts = [wave.start for wave in waves]  # width_bucket(position, starts) = wave index + 1
    statement = f"""
        INSERT INTO {NodeUpgrade._meta.db_table} ({", ".join(UPGRADE_COLUMNS)})
        SELECT %(rollout)s, id, pool_id, width_bucket(position, %(starts)s::int[]) - 1, position,
               'pending', true, %(version)s
        FROM (
            SELECT id, pool_id, (row_number() OVER (ORDER BY md5(id::text || %(seed)s)) - 1)::int AS position
            FROM {Node._meta.db_table}
            WHERE pool_id = ANY(%(pools)s)
        ) AS ordered
    """  # noqa: S608 - table names from the models, values bound
    params = {
        "rollout": rollout.id,
        "starts": starts,
        "version": NEW,
        "seed": rollout.id.hex,
        "pools": [pool.id for pool in pools],
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.rowcount


def copy_from_python(rollout: Any, pools: list) -> tuple[int, float]:
    """The rows rollout_create writes (its snapshot query and seeded shuffle), sent by COPY, committed.

    Returns (rows, seconds of the COPY, rows sent from Python included): it
    bypasses Django's cursor, so CaptureQueriesContext does not see it.
    """
    from django.db import connection, transaction

    from fleet.models import Node
    from rollout.models import NodeUpgrade
    from rollout.rollouts.spec import planned_waves, shuffle

    with transaction.atomic():
        pool_of = dict(Node.objects.filter(pool__in=pools).values_list("id", "pool_id"))
        order = shuffle(list(pool_of), seed=rollout.id)
        waves = planned_waves(rollout.waves, len(order))
        wave_of_position = [wave.index for wave in waves for _ in range(wave.total)]
        statement = f"COPY {NodeUpgrade._meta.db_table} ({', '.join(UPGRADE_COLUMNS)}) FROM STDIN"
        start = time.perf_counter()
        with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
            for position, node_id in enumerate(order):
                copy.write_row(
                    (rollout.id, node_id, pool_of[node_id], wave_of_position[position], position, "pending", True, NEW)
                )
        seconds = time.perf_counter() - start  # the COMMIT after it is captured by Django
    return len(order), seconds


def check_rows(rollout_id: Any, nodes: int) -> None:
    from rollout.models import NodeUpgrade

    count = NodeUpgrade.objects.filter(rollout_id=rollout_id).count()
    if count != nodes:
        raise RuntimeError(f"rollout {rollout_id} has {count} node rows, expected {nodes}")


@dataclass
class CreateResult:
    nodes: int
    fleet_seconds: float
    create: Series
    raw: Series
    copy: Series
    fleet: tuple[Any, list]  # (tenant, pools): left without rollouts, reused by the tick benchmark


def bench_create(nodes: int, repeat: int, profile: bool) -> CreateResult:
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec

    start = time.perf_counter()
    tenant, pools = make_fleet("create", nodes)
    fleet_seconds = time.perf_counter() - start
    vacuum_all()
    result = CreateResult(nodes, fleet_seconds, Series(), Series(), Series(), (tenant, pools))
    for _ in range(repeat):
        rollout = bare_rollout(tenant, pools)
        sample = result.raw.add(measure(lambda r=rollout: raw_insert_select(r, pools, nodes)))
        if sample.value != nodes:
            raise RuntimeError(f"INSERT ... SELECT wrote {sample.value} rows, expected {nodes}")
        drop_rollout(rollout.id)

        sample = result.create.add(measure(lambda: rollout_create(tenant=tenant, spec=rollout_spec(version=NEW))))
        check_rows(sample.value.id, nodes)
        drop_rollout(sample.value.id)

        rollout = bare_rollout(tenant, pools)
        sample = result.copy.add(measure(lambda r=rollout: copy_from_python(r, pools)))
        sample.queries += 1  # the COPY
        sample.sql_seconds += sample.value[1]  # its time on the wire and in the server
        check_rows(rollout.id, nodes)
        drop_rollout(rollout.id)
    if profile:
        print_profile(
            f"rollout_create, {nodes:,} nodes", lambda: rollout_create(tenant=tenant, spec=rollout_spec(version=NEW))
        )
    return result


def create_table(result: CreateResult, repeat: int) -> str:
    raw = result.raw.median("seconds")

    def row(name: str, series: Series) -> list[str]:
        seconds = series.median("seconds")
        sql = series.median("sql_seconds")
        return [
            name,
            f"{seconds:.3f}",
            series.spread(),
            f"{series.median('queries'):.0f}",
            f"{sql:.3f}",
            f"{series.python_median():.3f}",
            f"{seconds / raw:.1f}x",
            f"{result.nodes / seconds:,.0f}",
        ]

    rows = [
        row("rollout_create (service)", result.create),
        row("INSERT ... SELECT (raw SQL)", result.raw),
        row("snapshot + shuffle + COPY", result.copy),
    ]
    headers = ["create", "seconds", "min-max", "queries", "sql s", "python s", "vs raw", "rows/s"]
    title = f"create: one rollout over {result.nodes:,} nodes in {POOLS} pools (median of {repeat}, each committed)"
    note = (
        f"(fleet setup, untimed above: {result.nodes:,} nodes + sessions bulk-created in {result.fleet_seconds:.1f} s)"
    )
    ratio = (
        f"rollout_create / raw INSERT ... SELECT at {result.nodes:,} nodes: "
        f"{result.create.median('seconds') / raw:.2f}x (target <= 1.5x at 100,000)"
    )
    return f"{title}\n\n{table(headers, rows)}\n{note}\n\n{ratio}"
