"""A scheduled rollout's "Start now" button: the API's start (rollout_start), confirmed, held to its rules, audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import AuditEntry
from rollout.models import Rollout
from tests.admin.conftest import make_rollout
from tests.admin.test_rollouts import LIST, action_url, detail, flash

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled(tenant, releases) -> Rollout:
    start = timezone.now() + timedelta(days=1)
    rollout = make_rollout(tenant, {"gpu-a": (4, "0.5")}, waves=[100], start_at=start.isoformat())
    assert rollout.state == Rollout.State.SCHEDULED
    return rollout


def test_start_now_confirms_then_starts_and_audits_as_the_api(root, scheduled):
    body = root.get(detail(scheduled)).content.decode()
    assert action_url(scheduled, "start") in body
    assert "Start now" in body

    page = root.get(action_url(scheduled, "start"))
    assert page.status_code == 200
    assert b"are you sure?" in page.content
    scheduled.refresh_from_db()
    assert scheduled.state == "scheduled"  # asking changes nothing

    response = root.post(action_url(scheduled, "start"), {"post": "yes"})
    assert response.status_code == 302
    assert response["Location"] == detail(scheduled)
    scheduled.refresh_from_db()
    assert scheduled.state == "active"
    last = scheduled.events.order_by("at", "id").last()
    assert (last.kind, last.data["actor"]) == ("rollout.started", "admin:root")
    entry = AuditEntry.objects.get(action="rollout.start")
    assert (entry.actor_user, entry.actor_via, entry.object_id) == ("root", "admin", str(scheduled.pk))
    assert (entry.before["state"], entry.after["state"]) == ("scheduled", "active")
    assert action_url(scheduled, "start") not in root.get(detail(scheduled)).content.decode()  # once only


def test_start_now_on_a_rollout_that_is_not_scheduled_is_refused_and_changes_nothing(root, scheduled):
    root.post(action_url(scheduled, "start"), {"post": "yes"})
    before = AuditEntry.objects.filter(action="rollout.start").count()
    response = root.post(action_url(scheduled, "start"), {"post": "yes"}, follow=True)
    assert any("invalid_state" in message for message in flash(response))
    assert AuditEntry.objects.filter(action="rollout.start").count() == before


def test_the_list_action_starts_the_selected_scheduled_rollouts(root, scheduled):
    selected = {"action": "start_selected", "_selected_action": [scheduled.pk]}
    assert b"are you sure?" in root.post(LIST, selected).content
    root.post(LIST, {**selected, "post": "yes"})
    scheduled.refresh_from_db()
    assert scheduled.state == "active"
