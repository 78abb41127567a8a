"""Engine benchmark: ``rollout_create`` and ``rollout_tick`` at fleet scale, in-process, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks engine [--quick]

What it does (bounded: a few minutes in all, ``--quick`` under a minute):

1. drops and recreates a dedicated database (``rollout_bench_engine`` on the
   server of DATABASE_URL, never the database DATABASE_URL names), migrates it
   in-process, registers releases 0.9.0 (what the fleet runs) and 1.0.0 (the
   target, amd64 and arm64) signed by a throw-away key pinned in
   ``settings.ROLLOUT``;
2. **create**: a fleet of N nodes (100,000; 10,000 with ``--quick``) in 4
   pools with their agent sessions, bulk-inserted like
   ``tests/factories.py::fleet``; then, alternating, ``repeat`` times each:
   - ``rollout_create`` over the whole fleet (default waves), committed;
   - the same NodeUpgrade rows written by one ``INSERT INTO
     rollout_nodeupgrade (...) SELECT ... FROM fleet_node`` (shuffled by
     md5(node id || seed), waves by ``width_bucket``), committed into a fresh
     rollout: the floor of what PostgreSQL needs to write those rows;
   - the rows the service writes, sent by psycopg ``COPY ... FROM STDIN``
     from Python (the snapshot query, the same seeded shuffle, COPY): what a
     COPY-based create would cost;
   each followed (untimed) by deleting the rollout and ``VACUUM ANALYZE``, so
   every repetition starts from the same table state;
3. **tick**: for 1,000, 10,000 and 100,000 nodes (4 pools, disruption budget
   5 %, one wave of 100 % so the budget is what limits a tick), a rollout
   created untimed, then
   - *first*: the first tick (starts 5 % of each pool); repeated by resetting
     the started rows, their nodes' spec.daemon, and vacuuming (untimed);
   - *settle*: after the in-flight nodes' sessions report the target version
     (an untimed UPDATE), a tick that settles them and starts the next 5 %;
   - *no-op*: a tick right after, with nothing to settle or start;
   reporting for each: seconds (median of ``repeat``), SQL statements and the
   SQL part of the time (``CaptureQueriesContext``; the rest is Python), and
   Celery messages published on commit (one ``node-upgrade-timeout`` per
   started node, plus tick requests).

Celery: with a ``redis://`` CELERY_BROKER_URL (``make bench``) messages go to
a private queue ``bench-engine-<pid>`` that nobody consumes and that is
deleted at the end; otherwise to the in-memory transport. Logging stays at
the project's level (INFO: one JSON line per started node, as in production)
but is written to /dev/null.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rollout.services.plan import rollout_spec

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `project` importable
    sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/rollout"
BENCH_DATABASE = "rollout_bench_engine"
POOLS = 4
BUDGET = "0.05"
OLD, NEW = "0.9.0", "1.0.0"


# --- the database -------------------------------------------------------------------------------


def database_urls(base_url: str, name: str) -> tuple[str, str]:
    """(URL of the bench database, URL of the maintenance database) on the server of ``base_url``."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise SystemExit(f"engine benchmark: DATABASE_URL must be a PostgreSQL URL, not {parts.scheme!r}")
    return urlunsplit(parts._replace(path=f"/{name}")), urlunsplit(parts._replace(path="/postgres"))


def recreate_database(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def server_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url, connect_timeout=10) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])


def setup_django(db_url: str, queue: str) -> None:
    """Configure Django in-process on the bench database (before anything imports settings)."""
    from django.apps import apps

    if apps.ready:
        from django.conf import settings

        name = settings.DATABASES["default"]["NAME"]
        if name != BENCH_DATABASE:
            raise RuntimeError(f"Django is already set up on {name!r}; the engine benchmark needs its own database.")
        return
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DATABASE_URL"] = db_url
    os.environ["DATABASE_CONN_MAX_AGE"] = "0"
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = queue
    if not os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
        os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ.setdefault("ROLLOUT_RUN_DIR", tempfile.mkdtemp(prefix="bench-engine-"))
    import django

    django.setup()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)


def configure(run_dir: Path) -> None:
    from django.conf import settings

    from tests.factories import rollout_settings

    settings.ROLLOUT = rollout_settings()  # pins of key 0, downloads URL on 127.0.0.1
    settings.MEDIA_ROOT = run_dir / "media"
    settings.FLEET_MIN_PROTOCOL_VERSION = 2
    settings.FLEET_HEARTBEAT_SECONDS = 10


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def register_releases() -> None:
    from rollout.services.releases import release_register
    from tests.factories import manifest, signed

    release_register(envelope=signed(manifest(OLD, 1)))
    release_register(envelope=signed(manifest(NEW, 2)))


def vacuum(*tables: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")


def vacuum_all() -> None:
    from fleet.models import Node, NodeSession
    from rollout.models import NodeUpgrade

    vacuum(NodeUpgrade._meta.db_table, Node._meta.db_table, NodeSession._meta.db_table)


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    queries: int = 0
    sql_seconds: float = 0.0
    messages: int = 0
    commit_hooks_seconds: float = 0.0
    value: Any = None


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)

    def add(self, sample: Sample) -> Sample:
        self.samples.append(sample)
        return sample

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)

    def python_median(self) -> float:
        """Median of each sample's time outside SQL statements and on-commit hooks."""
        return statistics.median(s.seconds - s.sql_seconds - s.commit_hooks_seconds for s in self.samples)

    def spread(self) -> str:
        times = [s.seconds for s in self.samples]
        return f"{min(times):.3f}-{max(times):.3f}" if len(times) > 1 else "-"


@contextmanager
def count_messages() -> Iterator[list[int]]:
    from celery.signals import before_task_publish

    counter = [0]

    def count(**_: Any) -> None:
        counter[0] += 1

    before_task_publish.connect(count, weak=False)
    try:
        yield counter
    finally:
        before_task_publish.disconnect(count)


@contextmanager
def time_commit_hooks() -> Iterator[list[float]]:
    """Seconds spent running on-commit hooks (here: publishing Celery messages)."""
    from django.db import connection

    spent = [0.0]
    original = connection.run_and_clear_commit_hooks

    def timed() -> None:
        start = time.perf_counter()
        try:
            original()
        finally:
            spent[0] += time.perf_counter() - start

    connection.run_and_clear_commit_hooks = timed
    try:
        yield spent
    finally:
        del connection.run_and_clear_commit_hooks  # back to the class's method


def measure(fn: Callable[[], Any]) -> Sample:
    """Run ``fn`` once: wall seconds, SQL statements and their time, Celery messages and on-commit time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with count_messages() as messages, time_commit_hooks() as hooks, CaptureQueriesContext(connection) as queries:
        start = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - start
    sql_seconds = sum(float(q["time"]) for q in queries.captured_queries)
    return Sample(seconds, len(queries.captured_queries), sql_seconds, messages[0], hooks[0], value)


# --- fixtures -----------------------------------------------------------------------------------


def make_fleet(slug: str, nodes: int) -> tuple[Any, list]:
    """A tenant with ``nodes`` nodes in POOLS pools (budget 5 %), agents joined on OLD (factories.fleet)."""
    from fleet.services.iam import tenant_create
    from tests.factories import fleet

    tenant = tenant_create(slug=slug)
    sizes = [nodes // POOLS + (1 if i < nodes % POOLS else 0) for i in range(POOLS)]
    fleet(tenant, {f"{slug}-{i}": (size, BUDGET) for i, size in enumerate(sizes)}, version=OLD)
    from fleet.models import Pool

    return tenant, list(Pool.objects.filter(tenant=tenant).order_by("id"))


def heartbeat_all() -> None:
    """Every agent heartbeats now, so no node counts as offline however long the run takes."""
    from django.utils import timezone

    from fleet.models import NodeSession

    NodeSession.objects.filter(left_at__isnull=True).update(last_seen_at=timezone.now())


def drop_rollout(rollout_id: Any) -> None:
    """Delete a rollout and its rows (NodeUpgrade by one DELETE, not the ORM's collector)."""
    from django.db import connection

    from rollout.models import NodeUpgrade, Rollout

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {NodeUpgrade._meta.db_table} WHERE rollout_id = %s", [rollout_id])  # noqa: S608
    Rollout.objects.filter(pk=rollout_id).delete()
    vacuum(NodeUpgrade._meta.db_table)


# --- create -------------------------------------------------------------------------------------

UPGRADE_COLUMNS = ("rollout_id", "node_id", "pool_id", "wave", "position", "state", "claims_node", "target_version")


def bare_rollout(tenant: Any, pools: list) -> Any:
    """A rollout row without node rows (for the raw and COPY writers)."""
    from django.utils import timezone

    from rollout.models import Release, Rollout
    from rollout.services.plan import DEFAULT_WAVES

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
    from rollout.services.plan import DEFAULT_WAVES, planned_waves

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
    from rollout.services.plan import planned_waves, shuffle

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
    from rollout.services.rollouts import rollout_create

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


# --- tick ---------------------------------------------------------------------------------------


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
    from rollout.services.controller import rollout_tick
    from rollout.services.rollouts import rollout_create

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


# --- output -------------------------------------------------------------------------------------


def print_profile(title: str, fn: Callable[[], Any], top: int = 25) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n--- profile: {title} ---")
    print(out.getvalue())


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


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
    return f"{title}\n\n{table(headers, rows)}\n{note}"


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
        "(CaptureQueriesContext); messages / on-commit s: Celery messages published on commit (a timeout task\n"
        "per started node + tick requests) and the time that took; python s: the rest."
    )
    return f"{title}\n\n{table(headers, rows)}\n{legend}"


# --- entry point --------------------------------------------------------------------------------


def delete_queue(queue: str) -> None:
    """Remove the private queue from Redis: its messages (every priority list) and its binding."""
    from kombu.exceptions import KombuError

    from project.celery import app

    try:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            channel.queue_purge(queue)  # deletes the lists, whatever this process's bindings
            channel.client.delete(channel.keyprefix_queue % queue)  # Celery's exchange is named after the queue
    except (KombuError, OSError, AttributeError) as exc:
        print(f"warning: could not delete Celery queue {queue}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 nodes for create, ticks at 1k and 10k")
    parser.add_argument("--create-nodes", type=int, help="nodes of the create benchmark (default 100,000)")
    parser.add_argument("--tick-nodes", type=int, nargs="+", help="fleet sizes of the tick benchmark")
    parser.add_argument("--repeat", type=int, help="repetitions of each measurement (default 3)")
    parser.add_argument("--profile", action="store_true", help="also print cProfile of one create and one tick")
    parser.add_argument("--skip", choices=["create", "tick"], action="append", default=[])
    parser.add_argument("--database", default=BENCH_DATABASE, help="dedicated database, dropped and recreated")
    options = parser.parse_args(argv)
    create_nodes = options.create_nodes or (10_000 if options.quick else 100_000)
    tick_nodes = options.tick_nodes or ([1_000, 10_000] if options.quick else [1_000, 10_000, 100_000])
    repeat = options.repeat or 3

    base = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    db_url, admin_url = database_urls(base, options.database)
    queue = f"bench-engine-{os.getpid()}"
    started = time.perf_counter()
    print(f"database {options.database}: drop, create, migrate")
    recreate_database(admin_url, options.database)
    setup_django(db_url, queue)
    from django.conf import settings

    run_dir = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    configure(run_dir)
    migrate()
    register_releases()
    broker = settings.CELERY_BROKER_URL.split("://")[0]
    print(f"celery broker: {broker} (queue {queue}); log lines -> /dev/null")
    try:
        tables = []
        fleets: dict[int, tuple[Any, list]] = {}
        if "create" not in options.skip:
            print(f"create: {create_nodes:,} nodes x {repeat} ...", flush=True)
            created = bench_create(create_nodes, repeat, options.profile)
            fleets[create_nodes] = created.fleet
            tables.append(create_table(created, repeat))
        if "tick" not in options.skip:
            results = []
            for nodes in tick_nodes:
                print(f"tick: {nodes:,} nodes x {repeat} ...", flush=True)
                profile = options.profile and nodes == max(tick_nodes)
                results.append(bench_tick(nodes, repeat, profile, fleets.pop(nodes, None)))
            tables.append(tick_table(results, repeat))
    finally:
        if broker.startswith("redis"):
            delete_queue(queue)
    for text in tables:
        print()
        print(text)
    print(f"\nengine benchmark: {time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
