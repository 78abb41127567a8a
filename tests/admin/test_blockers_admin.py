"""Why not yet in the admin: each node upgrade's blocker, and the rollout's at the top of its page.

See docs/controller.md#why-not-yet.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Node, Pool
from fleet.services.sessions import agent_session_leave
from fleet.services.workflows import workflow_start
from rollout.models import NodeUpgrade
from rollout.rollouts.actions import rollout_pause
from tests.admin.conftest import make_rollout
from tests.rollout.helpers import heartbeat_all, in_flight, tick

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/nodeupgrade/"


def page(client, rollout) -> str:
    response = client.get(f"/admin/rollout/rollout/{rollout.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_node_list_says_what_each_node_waits_for(root, tenant, releases):
    rollout = make_rollout(tenant, {"a": (4, "0.25")}, waves=[50, 100], soak_seconds=0)
    bigger = make_rollout(tenant, {"b": (40, "0.025")}, waves=[50, 100], soak_seconds=0)
    tick(rollout)
    tick(bigger)
    body = root.get(LIST, {"rollout": rollout.pk}).content.decode()
    assert "waiting for" in body.lower()
    assert "Upgrading: waiting for its agent to rejoin on 1.0.0" in body  # the node in flight
    assert "Budget full in a: 1 of 1 nodes disrupted." in body  # the other node of wave 0
    assert "Its wave (wave 2) has not started: the rollout is at wave 1." in body
    # The column costs a constant number of queries: a page of 40 rows as many as a page of 4 alike.
    with CaptureQueriesContext(connection) as few:
        root.get(LIST, {"rollout": rollout.pk})
    with CaptureQueriesContext(connection) as many:
        root.get(LIST, {"rollout": bigger.pk})
    assert len(few) == len(many)


def test_the_rollout_page_says_budget_full_with_who_holds_it(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (10, "0.3")}, waves=[100], max_failure_ratio=1)  # budget: 3 nodes
    # Workflows on the last two nodes of the rollout's order, so the tick's one free slot goes to another node.
    last = NodeUpgrade.objects.filter(rollout=rollout).order_by("-position").values_list("node_id", flat=True)[:2]
    for node_id in last:
        workflow_start(tenant=tenant, node_id=node_id, kind="remediation")
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    assert "waiting for 1 node in flight" in page(root, rollout)  # its own upgrade fills the last slot
    # The node never comes back: it times out and still holds its slot (failed, not back since).
    agent_session_leave(node=Node.objects.select_related("session").get(pk=upgrade.node_id))
    with time_machine.travel(upgrade.deadline + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
        assert NodeUpgrade.objects.get(pk=upgrade.pk).state == "failed"
        assert not in_flight(rollout)
        body = page(root, rollout)
    assert "budget full in gpu-a: 3 of 3 disrupted by 2 workflows and 1 upgrade" in body


def test_the_rollout_page_says_waiting_for_the_window(root, tenant, releases):
    with time_machine.travel(datetime(2026, 1, 14, 12, 0, tzinfo=UTC), tick=False):  # 13:00 in Berlin (CET)
        rollout = make_rollout(tenant, {"gpu-a": (2, "1")})
        window = {"days": ["wed"], "start": "22:00", "durationMinutes": 120, "timezone": "Europe/Berlin"}
        Pool.objects.filter(name="gpu-a").update(maintenance_windows=[window])
        body = page(root, rollout)
    assert "waiting for the 22:00 Europe/Berlin window (gpu-a)" in body
    assert "2026-01-14 21:00:00 UTC" in body


def test_the_rollout_page_says_paused_and_nothing_while_moving(root, tenant, releases):
    rollout = make_rollout(tenant, {"a": (2, "1")})
    assert "Not moving" not in page(root, rollout)  # the next tick starts its nodes
    rollout_pause(rollout_id=rollout.id, tenant=tenant)
    assert "paused: paused by an operator" in page(root, rollout)
