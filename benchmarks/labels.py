"""Labels benchmark: a create with a selector, and bulk labelling, at fleet scale, each against a reference.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rollout .venv/bin/python -m benchmarks labels [--quick]

In-process on the engine benchmark's dedicated database (dropped and recreated). A tenant with N nodes
(100,000; 10,000 with ``--quick``) in 4 pools, 10 % of them labelled ``ring=canary``, and a second tenant
whose pools hold as many nodes as that selection. Alternating, ``repeat`` times each (medians printed):

- ``rollout_create`` with ``selector: "ring=canary"`` over the first tenant (10 % of its nodes) against
  ``rollout_create`` over the second tenant's pools (the same number of nodes given as pools);
- ``POST /nodes/labels/``'s service (``nodes_label``: every node of the first tenant gets a label, one
  UPDATE, audited) against the raw ``UPDATE fleet_node SET labels = labels || '{…}' WHERE tenant_id = …``.

Targets (docs/benchmarks.md, "Labels"): the create within 1.2x of its reference, the bulk labelling within 1.5x.
That the node list with a selector is served by the GIN index is a test (tests/fleet/test_selectors.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.database import DEFAULT_DATABASE_URL, database_urls, recreate_database
from benchmarks.engine.setup import (
    BENCH_DATABASE,
    NEW,
    configure,
    drop_rollout,
    make_fleet,
    migrate,
    register_releases,
    setup_django,
    vacuum_all,
)

SHARE = 10  # one node in SHARE is in the canary ring


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    from django.db import transaction

    start = time.perf_counter()
    with transaction.atomic():
        value = fn()
    return time.perf_counter() - start, value


def bench(nodes: int, repeat: int) -> list[tuple[str, float, float, float]]:
    from django.db import connection

    from fleet.models import Node
    from fleet.services.labels import nodes_label
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec

    tenant, _ = make_fleet("labelled", nodes)
    pooled, _ = make_fleet("pooled", nodes // SHARE)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE fleet_node SET labels = %s::jsonb WHERE tenant_id = %s AND abs(hashtext(id::text)) %% %s = 0",
            ['{"ring": "canary"}', tenant.pk, SHARE],
        )
    selected = Node.objects.filter(tenant=tenant, labels__contains={"ring": "canary"}).count()
    vacuum_all()
    creates: dict[str, list[float]] = {"selector": [], "pools": []}
    labels: dict[str, list[float]] = {"service": [], "raw": []}
    for index in range(repeat):
        seconds, rollout = _timed(lambda: rollout_create(tenant=pooled, spec=rollout_spec(version=NEW)))
        creates["pools"].append(seconds)
        drop_rollout(rollout.id)
        seconds, rollout = _timed(
            lambda: rollout_create(tenant=tenant, spec=rollout_spec(version=NEW, selector="ring=canary"))
        )
        creates["selector"].append(seconds)
        drop_rollout(rollout.id)

        def raw(value: str = f"r{index}") -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE fleet_node SET labels = labels || %s::jsonb WHERE tenant_id = %s",
                    ['{"zone": "%s"}' % value, tenant.pk],  # noqa: UP031
                )
                return cursor.rowcount

        seconds, matched = _timed(raw)
        labels["raw"].append(seconds)
        vacuum_all()
        seconds, matched = _timed(
            lambda: nodes_label(tenant=tenant, selector="", set_labels={"zone": f"s{index}"})  # noqa: B023
        )
        labels["service"].append(seconds)
        if matched != nodes:
            raise RuntimeError(f"nodes_label matched {matched}, expected {nodes}")
        vacuum_all()
    print(f"{nodes:,} nodes, {selected:,} of them in the ring (the pooled tenant: {nodes // SHARE:,})")
    rows = []
    for name, series, reference in (
        ("create, selector 10 % / pools", creates["selector"], creates["pools"]),
        ("bulk labels, nodes_label / raw UPDATE", labels["service"], labels["raw"]),
    ):
        ours, ref = statistics.median(series), statistics.median(reference)
        rows.append((name, ours, ref, ours / ref))
    return rows


def _store_binary() -> None:
    """The target's amd64 binary (a create refuses a release without the stored binary its nodes need)."""
    import io

    from rollout.registry.binaries import release_binary_store
    from tests.factories import binary_bytes

    release_binary_store(version=NEW, platform="linux-amd64", source=io.BytesIO(binary_bytes(NEW)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks labels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 nodes instead of 100,000")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args(argv)
    nodes = options.nodes or (10_000 if options.quick else 100_000)
    base = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    db_url, admin_url = database_urls(base, BENCH_DATABASE)
    recreate_database(admin_url, BENCH_DATABASE)
    setup_django(db_url, f"bench-labels-{os.getpid()}")
    configure(Path(tempfile.mkdtemp(prefix="bench-labels-")))
    migrate()
    register_releases()
    _store_binary()
    rows = bench(nodes, options.repeat)
    print("\n| what | seconds | reference | ratio |\n| --- | --- | --- | --- |")
    for name, ours, ref, ratio in rows:
        print(f"| {name} | {ours:.3f} | {ref:.3f} | {ratio:.2f} |")
    return 0
