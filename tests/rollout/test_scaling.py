"""The number of SQL queries of one tick does not grow with the fleet (docs/architecture.md#scale-targets)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rollout.controller.tick import rollout_tick
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.helpers import rejoin

pytestmark = pytest.mark.django_db


def queries_of_ticks(tenant, nodes: int) -> list[int]:
    """Queries of: the first tick (starts nodes), a tick that settles and starts more, a no-op tick."""
    fleet(tenant, {"a": (nodes // 2, "0.02"), "b": (nodes - nodes // 2, "0.02")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    counts = []
    with CaptureQueriesContext(connection) as first:
        assert rollout_tick(rollout_id=rollout.id).started == 2 * -(-nodes // 2 * 2 // 100)
    counts.append(len(first))
    for upgrade in rollout.node_upgrades.filter(state="in_flight"):
        rejoin(upgrade.node_id, "1.0.0")
    with CaptureQueriesContext(connection) as second:
        rollout_tick(rollout_id=rollout.id)
    counts.append(len(second))
    with CaptureQueriesContext(connection) as third:
        noop = rollout_tick(rollout_id=rollout.id)
    # The budget is full and nothing rejoined: nothing to settle, start, skip or advance.
    assert (noop.started, noop.succeeded, noop.failed, noop.skipped, noop.advanced) == (0, 0, 0, 0, False)
    counts.append(len(third))
    return counts


def test_queries_per_tick_are_the_same_for_100_and_5000_nodes(tenant, other_tenant, releases):
    small = queries_of_ticks(tenant, 100)
    large = queries_of_ticks(other_tenant, 5000)
    assert small == large, (small, large)
