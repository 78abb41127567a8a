"""Supersede over generated fleets (hypothesis): one writer per node, the bad release's nodes first, budgets hold.

Each example builds a fleet (1 to 3 pools of 1 to 6 nodes, budgets 0.2 to 1), runs a rollout of the bad
release some ticks (agents confirming some of its nodes), supersedes it, and ticks the new rollout; after the
supersede and after each tick: at most one claiming row per node, at most ceil(budget x nodes) nodes in flight
per pool (in any rollout), the nodes in flight to or running the bad release at the front of the new order,
and the taken-over nodes pointed at the fix. docs/controller.md#undoing-a-bad-release.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Count
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from fleet.models import Node, NodeSession, Pool
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.helpers import create, heartbeat_all, rejoin, tick

pytestmark = pytest.mark.django_db

BUDGETS = ["0.2", "0.25", "0.5", "1"]
fleets = st.lists(st.tuples(st.integers(1, 6), st.sampled_from(BUDGETS)), min_size=1, max_size=3)


class Rollback(Exception):
    """Ends an example: its transaction is rolled back, the next one starts from the same empty fleet."""


def check_one_writer() -> None:
    assert not NodeUpgrade.objects.filter(claims_node=True).values("node").annotate(n=Count("id")).filter(n__gt=1)


def check_budgets() -> None:
    for pool in Pool.objects.all():
        nodes = Node.objects.filter(pool=pool).count()
        allowed = math.ceil(Decimal(pool.disruption_budget) * nodes)
        assert NodeUpgrade.objects.filter(pool=pool, state="in_flight").count() <= allowed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pools=fleets,
    ticks=st.integers(0, 3),
    confirm=st.floats(0, 1),
    waves=st.sampled_from([[100], [50, 100], [10, 50, 100]]),
    seed=st.randoms(use_true_random=False),
)
def test_supersede_over_generated_fleets(tenant, releases, pools, ticks, confirm, waves, seed):
    try:
        with transaction.atomic():
            fleet(tenant, {f"p{i}": (n, budget) for i, (n, budget) in enumerate(pools)})
            bad = create(tenant, waves=waves)
            heartbeat_all()
            for _ in range(ticks):
                tick(bad)
                for row in NodeUpgrade.objects.filter(rollout=bad, state="in_flight"):
                    if seed.random() < confirm:
                        rejoin(row.node_id, "1.0.0")
                heartbeat_all()
            tick(bad)
            in_flight = set(
                NodeUpgrade.objects.filter(rollout=bad, state="in_flight").values_list("node_id", flat=True)
            )
            running = set(NodeSession.objects.filter(daemon_version="1.0.0").values_list("node_id", flat=True))
            spec = rollout_spec(version="1.0.1", waves=waves, soak_seconds=0, supersedes=str(bad.id))
            bad.refresh_from_db()
            if bad.state == "completed":  # every node confirmed it: a finished rollout is not superseded
                with pytest.raises(InvalidInput) as refused:
                    rollout_create(tenant=tenant, spec=spec)
                assert refused.value.code == "supersede_invalid"
                raise Rollback

            new = rollout_create(tenant=tenant, spec=spec)

            assert Rollout.objects.get(pk=bad.pk).state == "superseded"
            check_one_writer()
            check_budgets()
            order = list(NodeUpgrade.objects.filter(rollout=new).order_by("position").values_list("node_id", flat=True))
            ahead = len(in_flight | running)
            assert set(order[: len(in_flight)]) == in_flight
            assert set(order[:ahead]) == in_flight | running
            taken = set(NodeUpgrade.objects.filter(rollout=new, state="in_flight").values_list("node_id", flat=True))
            assert taken == in_flight
            for node in Node.objects.filter(pk__in=taken):
                assert node.spec["daemon"]["version"] == "1.0.1"
            for _ in range(2):
                heartbeat_all()
                tick(new)
                check_one_writer()
                check_budgets()
            raise Rollback
    except Rollback:
        pass
