"""The join's settle has two paths and one rule: ``succeed_rejoined`` (one statement, the common case) and the ORM
path (``_settle_reported_orm``: every case the statement leaves alone, under the row's lock). In production the
statement runs inside the join's own (rollout/hooks.py ``SETTLE_ON_JOIN``); here also alone.

Every combination of what decides a rejoin is staged (the node's row in flight or already settled, locked by a
tick or not, on its target version or not, arrived or not; the rollout active, paused or aborted, proving
readiness or not; its tick already queued or not) and the paths run on it, each in a savepoint rolled back
before the next. Their outcomes must be identical: whether the node settled, its row, the tick request and the
ticks published. The join's statement, run by the host as an agent's join runs it, must reach the same row,
tick request and ticks.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import transaction

from fleet.models import NodeSession
from fleet.services.sessions import agent_session_report_for_token
from rollout.controller.settle import _settle_reported_orm, node_upgrade_settle_reported
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade, Rollout, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet

pytestmark = pytest.mark.django_db

NOW = datetime(2031, 3, 5, 12, 0, tzinfo=UTC)


def outcome(path, *, node_id, upgrade_id, rollout_id, capture) -> tuple:
    with transaction.atomic(), capture() as published:
        settled = path(node_id=node_id, daemon_version="1.0.0")
        row = NodeUpgrade.objects.values("state", "settled_at", "claims_node", "arrived_at", "reason").get(
            pk=upgrade_id
        )
        queued = TickRequest.objects.get(rollout_id=rollout_id).queued
        transaction.set_rollback(True)
    return settled, row, queued, len(published)


def joined_outcome(*, node, upgrade_id, rollout_id, capture) -> tuple:
    """The agent's join through the host's statement, the settle in it, then what the host runs once it commits
    (the callbacks it leaves), capturing the ticks those publish: the row, the tick request and the ticks."""
    with transaction.atomic():
        NodeSession.objects.filter(node=node).update(left_at=NOW - timedelta(seconds=10))  # the agent restarted
        with capture() as joined:
            report = agent_session_report_for_token(
                token_hash=node.agent_token_hash, daemon_version="1.0.0", protocol_version=3
            )
        assert report is not None
        assert report.joined
        with capture() as published:
            for committed in joined:
                committed()
        row = NodeUpgrade.objects.values("state", "settled_at", "claims_node", "arrived_at", "reason").get(
            pk=upgrade_id
        )
        queued = TickRequest.objects.get(rollout_id=rollout_id).queued
        transaction.set_rollback(True)
    return row, queued, len(published)


def test_the_statement_and_the_orm_path_agree(tenant, releases, django_capture_on_commit_callbacks):
    with time_machine.travel(NOW - timedelta(seconds=30), tick=False):
        (node,) = fleet(tenant, {"a": (1, "1")})["a"]
        rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
        assert rollout_tick(rollout_id=rollout.id).started == 1
    upgrade = NodeUpgrade.objects.get(rollout=rollout, node=node)
    seen: set[tuple[str, object]] = set()
    combinations = itertools.product(
        ["in_flight", "succeeded"],  # the row
        [True, False],  # its target is the version the agent reports
        [False, True],  # arrived (proving readiness)
        ["active", "paused", "aborted"],  # the rollout
        [0, 30],  # minReadySeconds
        [False, True],  # a tick is queued already
    )
    for row_state, on_target, arrived, rollout_state, ready_seconds, queued in combinations:
        with transaction.atomic():
            NodeUpgrade.objects.filter(pk=upgrade.pk).update(
                state=row_state,
                claims_node=True,
                target_version="1.0.0" if on_target else "1.1.0",
                arrived_at=NOW - timedelta(seconds=5) if arrived else None,
            )
            Rollout.objects.filter(pk=rollout.pk).update(
                state=rollout_state,
                paused_reason=Rollout.PausedReason.OPERATOR if rollout_state == "paused" else None,
                min_ready_seconds=ready_seconds,
            )
            TickRequest.objects.filter(rollout=rollout).update(queued=queued)
            ids = {"upgrade_id": upgrade.pk, "rollout_id": rollout.id}
            capture = django_capture_on_commit_callbacks
            with time_machine.travel(NOW, tick=False):
                by_join = joined_outcome(node=node, **ids, capture=capture)
                # Alone, the settle runs once the join committed: the session as the join left it.
                NodeSession.objects.filter(node=node).update(daemon_version="1.0.0", joined_at=NOW, last_seen_at=NOW)
                by_statement = outcome(node_upgrade_settle_reported, node_id=node.id, **ids, capture=capture)
                by_orm = outcome(_settle_reported_orm, node_id=node.id, **ids, capture=capture)
            transaction.set_rollback(True)
        case = (row_state, on_target, arrived, rollout_state, ready_seconds, queued)
        assert by_statement == by_orm, case
        assert by_join == by_statement[1:], case
        settled, row, queued_after, published = by_statement
        seen.update({("settled", settled), ("state", row["state"]), ("tick published", published > 0)})
        seen.add(("queued after", queued_after))
        seen.add(("claims", row["claims_node"]))
    # Both outcomes of each rule were reached: the agreement is not that of two paths that never settle.
    assert {("settled", True), ("settled", False), ("tick published", True), ("tick published", False)} <= seen
    assert {("state", "succeeded"), ("state", "failed"), ("state", "in_flight")} <= seen
    assert {("claims", True), ("claims", False), ("queued after", True), ("queued after", False)} <= seen
