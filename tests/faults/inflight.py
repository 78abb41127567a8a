"""Nodes in flight for a fault test, written by a child process (the test process's Django is bound to another
database, as for tests/faults/seed.py): a pool of COUNT nodes whose agents joined on 0.9.0 (no agent runs
them), and a rollout of 1.0.0 over it, its budget the whole pool, whose first tick starts every node. No agent
ever comes back on 1.0.0: they stay in flight until their timeout (600 s), each holding its budget slot.

    python -m tests.faults.inflight POOL COUNT

The environment names the database (DATABASE_URL) and the broker. Prints {"rollout": "<id>"} as one line.
"""

from __future__ import annotations

import json
import os
import sys


def main(pool: str, count: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from fleet.models import Tenant
    from rollout.controller.tick import rollout_tick
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec
    from tests.factories import fleet

    tenant = Tenant.objects.get(slug="acme")  # tests/faults/seed.py's
    (node, *_) = fleet(tenant, {pool: (count, "1")})[pool]
    spec = rollout_spec(
        version="1.0.0", pool_ids=[str(node.pool_id)], waves=[100], soak_seconds=0, upgrade_timeout_seconds=600
    )
    rollout = rollout_create(tenant=tenant, spec=spec)
    rollout_tick(rollout_id=rollout.id)  # or the worker's tick of it, asked by the create: whichever holds it
    print(json.dumps({"rollout": str(rollout.id)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
