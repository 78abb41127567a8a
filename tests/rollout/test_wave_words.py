"""Texts a person reads count waves from 1; the API's indexes stay 0-based (docs/controller.md#why-not-yet,
docs/controller.md#events-and-logs)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from rollout.admin.rollouts import event_words
from rollout.controller.events import Paused, Promoted
from rollout.models import RolloutEvent
from tests.factories import fleet
from tests.rollout.helpers import create, in_flight, rejoin, tick

pytestmark = pytest.mark.django_db


def test_blockers_sentences_count_waves_from_1_and_their_fields_from_0(api, tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=300)
    rows = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/", {"wave": 1}).json()["results"]
    blocker = rows[0]["blocker"]
    assert (rows[0]["wave"], blocker["code"], blocker["wave"]) == (1, "wave_not_started", 0)
    assert blocker["detail"] == "Its wave (wave 2) has not started: the rollout is at wave 1."
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)  # wave 0 settled: it soaks
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/").json()
    assert (shown["currentWave"], shown["blocker"]["code"]) == (0, "soaking")
    assert shown["blocker"]["detail"].startswith("Wave 1 settled and soaks until ")
    rows = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/", {"wave": 1}).json()["results"]
    assert rows[0]["blocker"]["detail"].startswith("Wave 1 settled and soaks until ")


def test_an_events_message_and_the_admin_count_waves_from_1(api, tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100])
    tick(rollout)  # wave 1 of 2 starts with the rollout (its event is rollout.created)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    with capture_logs() as logs:
        tick(rollout)  # no soak: the next wave starts
    (line,) = (line for line in logs if line["event"] == "rollout.wave")
    assert (line["wave"], line["message"]) == (1, "wave 2 of 2 started: 2 node(s), up to 100 %")
    # The API keeps the index; the admin's event list says it as a person counts.
    data = RolloutEvent.objects.get(rollout=rollout, kind=RolloutEvent.Kind.WAVE).data
    assert data["wave"] == 1
    events = api.get(f"/api/compute/rollouts/{rollout.id}/events/").json()
    events = events.get("results", events) if isinstance(events, dict) else events
    assert [event["data"]["wave"] for event in events if event["kind"] == "rollout.wave"] == [1]
    assert event_words(data, {}, waves=2).startswith("wave 2 of 2, ")


def test_a_pause_and_a_promote_name_their_wave_from_1():
    paused = Paused(paused_reason="failure_ratio", wave=0, failed=2, succeeded=1, max_failure_ratio=0.5)
    assert paused.message(waves=3) == "wave 1 of 3 paused: 2 failed, 1 succeeded, over the maximum failure ratio 0.5"
    assert paused.data()["wave"] == 0
    assert Paused(paused_reason="operator", actor="alice").message(waves=3) is None
    assert Promoted(wave=1, soak_ends_at=None, actor="alice").message(waves=3).startswith("wave 2 of 3 promoted")
