"""While rollouts run, the periodic tick vacuums the rows they rewrite (docs/operations.md#table-maintenance):
the CI machines run PostgreSQL with autovacuum off, and production's autovacuum may come a minute late."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection, transaction

from fleet.models import FleetPulse, Node, NodeSession
from rollout.controller import tick as controller
from rollout.controller.tick import controller_tables_vacuum, rollouts_tick_all
from rollout.models import NodeUpgrade, Rollout, RolloutWave, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet

pytestmark = pytest.mark.django_db(transaction=True)

VACUUMED = [NodeUpgrade, TickRequest, Rollout, RolloutWave, Node, NodeSession, FleetPulse]


def vacuumed() -> dict[str, tuple]:
    """When each table was last vacuumed and analyzed by hand (PostgreSQL's own statistics)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, last_vacuum, last_analyze FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [[model._meta.db_table for model in VACUUMED]],
        )
        return {name: (vacuum, analyze) for name, vacuum, analyze in cursor.fetchall()}


def test_the_periodic_tick_vacuums_what_rollouts_rewrite_while_one_runs(tenant, releases):
    fleet(tenant, {"a": (3, "1")})
    before = vacuumed()
    assert len(before) == len(VACUUMED)
    rollouts_tick_all()
    assert vacuumed() == before  # no rollout: nothing to keep lean

    rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    rollouts_tick_all()
    after = vacuumed()
    changed = {name for name in after if after[name] != before[name]}
    assert changed == set(after)
    assert all(vacuum is not None and analyze is not None for vacuum, analyze in after.values())


def test_no_vacuum_inside_a_transaction(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    before = vacuumed()
    with transaction.atomic():  # VACUUM cannot run in one: skipped, the tick's work unharmed
        assert controller_tables_vacuum() is False
        rollouts_tick_all()
        assert NodeUpgrade.objects.filter(state="in_flight").count() == 1
    assert vacuumed() == before


def test_a_vacuum_that_fails_leaves_the_ticks_done(tenant, releases, monkeypatch):
    fleet(tenant, {"a": (1, "1")})
    rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))

    def vacuum_refused() -> bool:
        raise OperationalError("canceling statement due to statement timeout")

    monkeypatch.setattr(controller, "controller_tables_vacuum", vacuum_refused)
    assert rollouts_tick_all() == 1  # logged (rollout.vacuum_failed), not raised: the task is not retried
    assert NodeUpgrade.objects.filter(state="in_flight").count() == 1
