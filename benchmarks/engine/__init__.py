"""Engine benchmark: ``rollout_create`` and ``rollout_tick`` at fleet scale, in-process, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks engine [--quick]

In-process, without agents: nothing is downloaded (the simulator's download mode does not apply).

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
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database
from benchmarks.engine.create import bench_create, create_table
from benchmarks.engine.setup import BENCH_DATABASE, configure, migrate, register_releases, setup_django
from benchmarks.engine.tick import bench_tick, tick_table


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
