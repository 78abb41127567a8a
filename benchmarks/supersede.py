"""Supersede benchmark: a create that supersedes a 100,000-node rollout, against a plain create over the same nodes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks supersede [--quick]

In-process on a dedicated database (``rollout_bench_supersede``, dropped and recreated; never the one
DATABASE_URL names), with the engine benchmark's set-up (benchmarks/engine/setup.py): releases 0.9.0 (what
the fleet runs), 1.0.0 (the bad one) and 1.0.1 (the fix); N nodes (100,000; 10,000 with ``--quick``) in 4
pools with a budget of 5 %. Then, alternating, ``repeat`` times each, every one committed:

- *plain*: ``rollout_create`` of 1.0.1 over the whole fleet;
- *supersede*: ``rollout_create`` of 1.0.1 with ``supersedes`` naming a rollout of 1.0.0 over the same
  nodes (created and ticked once, untimed: 5 % of the nodes in flight, the rest pending): in the same
  transaction the old rollout's rows are cancelled or handed over, its in-flight nodes taken over, the
  new rows written, the in-flight nodes first.

The target (docs/benchmarks.md): supersede within 1.5x of the plain create at 100,000 nodes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database
from benchmarks.engine.measuring import Series, measure, table
from benchmarks.engine.setup import (
    NEW,
    POOLS,
    configure,
    drop_rollout,
    heartbeat_all,
    make_fleet,
    migrate,
    register_releases,
    setup_django,
    vacuum_all,
)

BENCH_DATABASE = "rollout_bench_supersede"
FIX = "1.0.1"
TARGET = 1.5


def register_fix() -> None:
    """The fix, 1.0.1 (sequence 3), with its binaries stored."""
    import io

    from rollout.registry.binaries import release_binary_store
    from rollout.registry.releases import release_register
    from tests.factories import binary_bytes, manifest, signed

    release_register(envelope=signed(manifest(FIX, 3)))
    for arch in ("amd64", "arm64"):
        release_binary_store(version=FIX, platform=f"linux-{arch}", source=io.BytesIO(binary_bytes(FIX, arch)))


def run(nodes: int, repeat: int) -> tuple[Series, Series, int]:
    """(plain, supersede, nodes taken over in the last supersede)."""
    from rollout.controller.tick import rollout_tick
    from rollout.models import NodeUpgrade, Rollout
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec

    tenant, _ = make_fleet("supersede", nodes)
    vacuum_all()
    plain, superseding, taken = Series(), Series(), 0
    for _ in range(repeat):
        sample = plain.add(measure(lambda: rollout_create(tenant=tenant, spec=rollout_spec(version=FIX))))
        drop_rollout(sample.value.id)
        vacuum_all()

        heartbeat_all()
        bad = rollout_create(tenant=tenant, spec=rollout_spec(version=NEW))
        rollout_tick(rollout_id=bad.id)
        vacuum_all()
        spec = rollout_spec(version=FIX, supersedes=str(bad.id))
        sample = superseding.add(measure(lambda s=spec: rollout_create(tenant=tenant, spec=s)))
        new = sample.value
        if Rollout.objects.get(pk=bad.id).state != Rollout.State.SUPERSEDED:
            raise RuntimeError("the old rollout was not superseded")
        rows = NodeUpgrade.objects.filter(rollout=new).count()
        if rows != nodes:
            raise RuntimeError(f"the superseding rollout has {rows} rows, expected {nodes}")
        taken = NodeUpgrade.objects.filter(rollout=new, state=NodeUpgrade.State.IN_FLIGHT).count()
        drop_rollout(new.id)
        drop_rollout(bad.id)
        vacuum_all()
    return plain, superseding, taken


def report(nodes: int, repeat: int, plain: Series, superseding: Series, taken: int) -> str:
    base = plain.median("seconds")

    def row(name: str, series: Series) -> list[str]:
        seconds = series.median("seconds")
        return [
            name,
            f"{seconds:.3f}",
            series.spread(),
            f"{series.median('queries'):.0f}",
            f"{series.median('sql_seconds'):.3f}",
            f"{seconds / base:.2f}x",
        ]

    headers = ["create", "seconds", "min-max", "queries", "sql s", "vs plain"]
    rows = [row("plain create", plain), row("supersede", superseding)]
    ratio = superseding.median("seconds") / base
    verdict = "within" if ratio <= TARGET else "OVER"
    return (
        f"supersede: one rollout over {nodes:,} nodes in {POOLS} pools (median of {repeat}, each committed; "
        f"{taken:,} nodes taken over)\n\n{table(headers, rows)}\n\n"
        f"supersede / plain create at {nodes:,} nodes: {ratio:.2f}x ({verdict} the target of {TARGET}x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks supersede", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 nodes")
    parser.add_argument("--nodes", type=int, help="nodes (default 100,000)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of each measurement (default 3)")
    parser.add_argument("--database", default=BENCH_DATABASE, help="dedicated database, dropped and recreated")
    options = parser.parse_args(argv)
    nodes = options.nodes or (10_000 if options.quick else 100_000)
    base = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    db_url, admin_url = database_urls(base, options.database)
    started = time.perf_counter()
    print(f"database {options.database}: drop, create, migrate")
    recreate_database(admin_url, options.database)
    setup_django(db_url, f"bench-supersede-{os.getpid()}")
    configure(Path(tempfile.mkdtemp(prefix="bench-supersede-")))
    migrate()
    register_releases()
    register_fix()
    print(f"supersede: {nodes:,} nodes x {options.repeat} ...", flush=True)
    plain, superseding, taken = run(nodes, options.repeat)
    print()
    print(report(nodes, options.repeat, plain, superseding, taken))
    print(f"\nsupersede benchmark: {time.perf_counter() - started:.0f} s in all")
    return 0
