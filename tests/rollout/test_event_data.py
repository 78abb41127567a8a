"""A pause's reason is ``pausedReason`` in the ``rollout.paused`` event's data, as in the rollout and its blockers
(docs/controller.md#events-and-logs); migration 0015 renamed the events stored under ``reason`` before."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from fleet.models import ApiKey
from rollout.models import RolloutEvent
from tests.factories import fleet
from tests.rollout.helpers import create, tick

pytestmark = pytest.mark.django_db

RENAME = importlib.import_module("rollout.migrations.0015_paused_event_paused_reason")


def test_an_operator_s_pause_names_its_reason_paused_reason_in_the_event(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant, upgrade_timeout_seconds=600)
    tick(rollout)
    assert api.post(f"/api/compute/rollouts/{rollout.pk}/pause/").status_code == 200
    events = api.get(f"/api/compute/rollouts/{rollout.pk}/events/").json()["results"]
    (paused,) = [event for event in events if event["kind"] == "rollout.paused"]
    # The key the operator acted through is named beside them (as in the audit trail and the webhooks' body).
    key = ApiKey.objects.get(user__username="ops")
    assert paused["data"] == {"pausedReason": "operator", "actor": "api:ops", "apiKeyId": key.pk, "apiKeyName": ""}
    assert api.get(f"/api/compute/rollouts/{rollout.pk}/").json()["pausedReason"] == "operator"


def test_the_migration_renames_the_reason_of_stored_pauses_only(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant)
    at = rollout.created_at
    old = RolloutEvent.objects.create(
        rollout=rollout, kind="rollout.paused", at=at, data={"reason": "failure_ratio", "wave": 0, "failed": 1}
    )
    new = RolloutEvent.objects.create(rollout=rollout, kind="rollout.paused", at=at, data={"pausedReason": "operator"})
    refused = RolloutEvent.objects.create(
        rollout=rollout, kind="node_upgrade.refused", at=at, data={"reason": "release_expired"}
    )
    with connection.cursor() as cursor:
        cursor.execute(RENAME.FORWARD)
    data = {event.pk: event.data for event in RolloutEvent.objects.filter(pk__in=[old.pk, new.pk, refused.pk])}
    assert data == {
        old.pk: {"pausedReason": "failure_ratio", "wave": 0, "failed": 1},
        new.pk: {"pausedReason": "operator"},
        refused.pk: {"reason": "release_expired"},  # another kind's own field
    }
    with connection.cursor() as cursor:
        cursor.execute(RENAME.BACKWARD)
    assert RolloutEvent.objects.get(pk=old.pk).data == {"reason": "failure_ratio", "wave": 0, "failed": 1}
    assert RolloutEvent.objects.get(pk=refused.pk).data == {"reason": "release_expired"}
