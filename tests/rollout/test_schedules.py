"""Schedules and deadlines (docs/controller.md#schedules): startAt, endBy, endBehavior, with time moved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from rollout.models import NodeUpgrade, Rollout, RolloutEvent, Webhook, WebhookDelivery
from tests.factories import fleet
from tests.rollout.helpers import heartbeat_all, in_flight, states, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def z(at) -> str:
    return at.isoformat().replace("+00:00", "Z")


def kinds(rollout_id) -> list[str]:
    return list(RolloutEvent.objects.filter(rollout_id=rollout_id).order_by("at", "id").values_list("kind", flat=True))


@pytest.fixture
def nodes(tenant, releases):
    return fleet(tenant, {"a": (10, "0.2")})


def create(api, **body) -> dict:
    response = api.post(URL, {"version": "1.0.0", "waves": [100], **body}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_rollout_with_start_at_ahead_is_scheduled_holds_its_nodes_and_starts_nothing(api, nodes):
    start = timezone.now() + timedelta(hours=1)
    body = create(api, startAt=z(start))
    assert (body["state"], body["startAt"], body["endBy"], body["endBehavior"]) == ("scheduled", z(start), None, None)
    assert body["blocker"]["code"] == "scheduled"
    assert body["blocker"]["startAt"] == z(start)
    rollout = Rollout.objects.get(pk=body["id"])
    tick(rollout)
    assert rollout.state == "scheduled"
    assert states(rollout) == {"pending": 10}
    rows = api.get(f"{URL}{body['id']}/nodes/").json()["results"]
    assert {(row["blocker"]["code"], row["blocker"]["startAt"]) for row in rows} == {("scheduled", z(start))}

    clash = api.post(URL, {"version": "1.0.0"}, format="json")
    assert clash.status_code == 409
    assert clash.json()["code"] == "conflict"
    assert clash.json()["rolloutIds"] == [body["id"]]

    assert [r["id"] for r in api.get(URL, {"state": "scheduled"}).json()["results"]] == [body["id"]]
    assert api.get(URL, {"state": "active"}).json()["results"] == []


def test_the_tick_starts_it_at_start_at_with_an_event_and_a_webhook(api, tenant, nodes):
    now = timezone.now()
    Webhook.objects.create(tenant=tenant, url="https://hooks.example.com/x", events=["rollout.started"], created_at=now)
    start = timezone.now() + timedelta(minutes=30)
    body = create(api, startAt=z(start))
    rollout = Rollout.objects.get(pk=body["id"])
    with time_machine.travel(start - timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
        assert rollout.state == "scheduled"
    with time_machine.travel(start + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
        assert rollout.state == "active"
        assert len(in_flight(rollout)) == 2  # ceil(0.2 x 10)
    assert kinds(rollout.id) == ["rollout.created", "rollout.started"]
    started = RolloutEvent.objects.get(rollout=rollout, kind="rollout.started")
    assert started.data == {"actor": "schedule", "startAt": start.isoformat()}
    assert WebhookDelivery.objects.filter(event="rollout.started").count() == 1
    assert api.get(f"{URL}{rollout.id}/").json()["waves"][0]["startedAt"] is not None


def test_start_now_and_only_when_scheduled(api, nodes):
    body = create(api, startAt=z(timezone.now() + timedelta(days=2)))
    response = api.post(f"{URL}{body['id']}/start/")
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "active"
    assert RolloutEvent.objects.get(rollout_id=body["id"], kind="rollout.started").data["actor"].startswith("api:")
    again = api.post(f"{URL}{body['id']}/start/")
    assert (again.status_code, again.json()["code"]) == (409, "invalid_state")


def test_pause_abort_and_resume_of_a_scheduled_rollout(api, nodes):
    start = timezone.now() + timedelta(hours=3)
    body = create(api, startAt=z(start))
    paused = api.post(f"{URL}{body['id']}/pause/").json()
    assert (paused["state"], paused["pausedReason"]) == ("paused", "operator")
    resumed = api.post(f"{URL}{body['id']}/resume/", {}, format="json").json()
    assert resumed["state"] == "scheduled"  # its startAt is still ahead
    with time_machine.travel(start + timedelta(minutes=1), tick=False):
        api.post(f"{URL}{body['id']}/pause/")
        resumed = api.post(f"{URL}{body['id']}/resume/", {}, format="json").json()
        # Resumed past its startAt, it starts now: as the schedule would have started it.
        assert resumed["state"] == "active"
        assert resumed["waves"][0]["startedAt"] == z(timezone.now())
        assert kinds(body["id"])[-2:] == ["rollout.resumed", "rollout.started"]
        api.post(f"{URL}{body['id']}/pause/")
        api.post(f"{URL}{body['id']}/resume/", {}, format="json")
        assert kinds(body["id"]).count("rollout.started") == 1  # once


def test_abort_of_a_scheduled_rollout_frees_its_nodes(api, nodes):
    body = create(api, startAt=z(timezone.now() + timedelta(hours=1)))
    aborted = api.post(f"{URL}{body['id']}/abort/", {}, format="json")
    assert aborted.json()["state"] == "aborted"
    assert states(Rollout.objects.get(pk=body["id"])) == {"cancelled": 10}
    assert api.post(URL, {"version": "1.0.0"}, format="json").status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {"startAt": "tomorrow"},
        {"startAt": "2026-06-01"},
        {"startAt": "2026-06-01T09:00:00"},  # no offset
        # ISO 8601 that is not RFC 3339 (Python's fromisoformat takes each of these)
        {"startAt": "2030-06-01T09:00Z"},  # no seconds
        {"startAt": "2030-06-01T09Z"},
        {"startAt": "20300601T090000Z"},  # basic format
        {"startAt": "2030-W22-1T09:00:00Z"},  # a week date
        {"startAt": "2030-06-01T09:00:00+0100"},  # an offset without its colon
        {"startAt": "2030-06-01T09:00:00,5Z"},  # a comma before the fraction
        {"startAt": "2030-06-01 09:00:00Z"},
        {"startAt": "2030-06-01T25:00:00Z"},
        # after 9999-12-31 in UTC: PostgreSQL would store it, psycopg could not read it back
        {"startAt": "9999-12-31T23:59:59-01:00"},
        {"endBy": "9999-12-31T23:59:59-01:00"},
        {"startAt": 1},
        {"startAt": "2020-01-01T00:00:00Z"},
        {"endBy": "2020-01-01T00:00:00Z"},
        {"endBy": "FUTURE", "startAt": "FUTURE+1"},
        {"endBehavior": "explode", "endBy": "FUTURE"},
        {"endBehavior": True, "endBy": "FUTURE"},
    ],
)
def test_a_bad_schedule_is_400_invalid_schedule_and_writes_nothing(api, nodes, body):
    soon = timezone.now() + timedelta(hours=1)
    times = {"FUTURE": z(soon), "FUTURE+1": z(soon + timedelta(hours=1))}
    body = {key: times.get(value, value) if isinstance(value, str) else value for key, value in body.items()}
    for query in ("", "?dryRun=true"):
        response = api.post(URL + query, {"version": "1.0.0", **body}, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["code"] == "invalid_schedule"
    assert not Rollout.objects.exists()
    assert not NodeUpgrade.objects.exists()


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ("2030-06-01T09:00:00Z", timedelta(0)),
        ("2030-06-01t09:00:00z", timedelta(0)),
        ("2030-06-01T09:00:00.123456789+05:30", timedelta(hours=5, minutes=30)),
        ("2030-06-01T09:00:00-01:00", timedelta(hours=-1)),
    ],
)
def test_start_at_takes_rfc_3339_forms(api, nodes, text, offset):
    body = create(api, startAt=text)
    assert body["state"] == "scheduled"
    expected = datetime(2030, 6, 1, 9, tzinfo=UTC) - offset
    assert Rollout.objects.get(pk=body["id"]).start_at.replace(microsecond=0) == expected


def test_start_at_a_few_seconds_past_starts_at_once(api, nodes):
    body = create(api, startAt=z(timezone.now() - timedelta(seconds=30)))
    assert body["state"] == "active"


# --- the deadline -----------------------------------------------------------------------------------
def _running(api, behavior: str | None, end_by) -> Rollout:
    extra = {"endBehavior": behavior} if behavior else {}
    body = create(api, endBy=z(end_by), **extra)
    assert body["endBehavior"] == (behavior or "pause")
    rollout = Rollout.objects.get(pk=body["id"])
    tick(rollout)
    assert len(in_flight(rollout)) == 2
    return rollout


def test_the_deadline_pauses_by_default_and_nodes_in_flight_settle(api, nodes):
    end_by = timezone.now() + timedelta(minutes=5)
    rollout = _running(api, None, end_by)
    with time_machine.travel(end_by + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "deadline")
    assert states(rollout) == {"in_flight": 2, "pending": 8}
    assert kinds(rollout.id)[-2:] == ["rollout.deadline", "rollout.paused"]
    deadline = RolloutEvent.objects.get(rollout=rollout, kind="rollout.deadline").data
    assert deadline == {"endBy": end_by.isoformat(), "endBehavior": "pause"}
    shown = api.get(f"{URL}{rollout.id}/").json()
    assert (shown["pausedReason"], shown["endBy"]) == ("deadline", z(end_by))


def test_a_paused_rollout_at_its_deadline_records_it_once_and_stays_paused_for_it(api, nodes):
    end_by = timezone.now() + timedelta(minutes=5)
    rollout = _running(api, None, end_by)
    assert api.post(f"{URL}{rollout.id}/pause/").json()["pausedReason"] == "operator"
    with time_machine.travel(end_by + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
        tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "deadline")
    assert kinds(rollout.id)[-2:] == ["rollout.paused", "rollout.deadline"]  # the operator's pause, then once
    assert RolloutEvent.objects.get(rollout=rollout, kind="rollout.deadline").data == {
        "endBy": end_by.isoformat(),
        "endBehavior": "pause",
    }
    assert states(rollout) == {"in_flight": 2, "pending": 8}


def test_the_deadline_aborts_and_nodes_in_flight_stay(api, nodes):
    end_by = timezone.now() + timedelta(minutes=5)
    rollout = _running(api, "abort", end_by)
    with time_machine.travel(end_by + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
    assert rollout.state == "aborted"
    assert states(rollout) == {"in_flight": 2, "cancelled": 8}
    assert kinds(rollout.id)[-2:] == ["rollout.deadline", "rollout.aborted"]


def test_the_deadline_aborts_with_rollback(api, nodes):
    end_by = timezone.now() + timedelta(minutes=5)
    rollout = _running(api, "abort_rollback", end_by)
    with time_machine.travel(end_by + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
    assert rollout.state == "aborted"
    assert states(rollout) == {"rolled_back": 2, "cancelled": 8}
    assert RolloutEvent.objects.get(rollout=rollout, kind="rollout.aborted").data["rollback"] is True


def test_resume_after_the_deadline_needs_a_later_end_by(api, nodes):
    end_by = timezone.now() + timedelta(minutes=5)
    rollout = _running(api, None, end_by)
    with time_machine.travel(end_by + timedelta(seconds=1), tick=False):
        heartbeat_all()
        tick(rollout)
        url = f"{URL}{rollout.id}/resume/"
        refused = api.post(url, {}, format="json")
        assert (refused.status_code, refused.json()["code"]) == (409, "deadline_passed")
        assert api.post(url, {"endBy": z(end_by)}, format="json").json()["code"] == "invalid_schedule"
        assert api.post(url, {"endBy": "soon"}, format="json").json()["code"] == "invalid_schedule"
        beyond = api.post(url, {"endBy": "9999-12-31T23:59:59-01:00"}, format="json")
        assert (beyond.status_code, beyond.json()["code"]) == (400, "invalid_schedule")
        rollout.refresh_from_db()
        assert (rollout.state, rollout.end_by) == ("paused", end_by)
        later = end_by + timedelta(hours=1)
        resumed = api.post(url, {"endBy": z(later)}, format="json")
        assert resumed.status_code == 200, resumed.json()
        assert (resumed.json()["state"], resumed.json()["endBy"]) == ("active", z(later))
        heartbeat_all()
        tick(rollout)
        assert rollout.state == "active"  # the new deadline is ahead


def test_null_for_a_schedule_or_a_selector_is_not_given(api, nodes):
    """The representation carries them as null: sent back, null means "not given"."""
    nulls = {"startAt": None, "endBy": None, "endBehavior": None, "selector": None}
    for query in ("?dryRun=true", ""):
        response = api.post(URL + query, {"version": "1.0.0", "waves": [100], **nulls}, format="json")
        assert response.status_code in (200, 201), response.json()
    body = response.json()
    assert (body["state"], body["startAt"], body["endBy"], body["endBehavior"], body["selector"]) == (
        "active",
        None,
        None,
        None,
        None,
    )
