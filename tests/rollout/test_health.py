"""A controller that is not running is visible (docs/controller.md#no-controller, docs/operations.md#health).

The tick leaves a trace (``lastTickAt`` on each rollout, the periodic tick's on the installation);
past max(3 x the stored interval of rollout/all, 10 s) without one, an active rollout and its pending rows say
``no_controller`` first, and ``GET /api/compute/health`` says the controller is not healthy (503).
The same with real processes: tests/integration/test_no_controller.py; the stored interval against
ROLLOUT_EVERY: tests/rollout/test_tick_schedule.py.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from rollout.controller.tick import rollouts_tick_all
from rollout.rollouts.actions import rollout_pause
from rollout.schedules import periodic_tick_ensure
from tests.factories import fleet, rollout_settings
from tests.rollout.helpers import heartbeat_all, tick

pytestmark = pytest.mark.django_db

HEALTH = "/api/compute/health"


def create(api, **extra):
    response = api.post("/api/compute/rollouts/", {"version": "1.0.0", "waves": [100], **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def shown(api, rollout_id):
    return api.get(f"/api/compute/rollouts/{rollout_id}/").json()


def row_codes(api, rollout_id) -> dict[str, set]:
    rows = api.get(f"/api/compute/rollouts/{rollout_id}/nodes/").json()["results"]
    codes: dict[str, set] = {}
    for row in rows:
        codes.setdefault(row["state"], set()).add((row["blocker"] or {}).get("code"))
    return codes


def test_health_needs_no_credentials_and_follows_the_periodic_tick(anonymous_api, settings):
    settings.ROLLOUT = rollout_settings(every=30)
    periodic_tick_ensure(every=30, reset=True)
    answer = anonymous_api.get(HEALTH)
    assert answer.status_code == 503  # no controller yet: a probe reading only the status sees it
    assert answer.json() == {"database": "ok", "broker": "ok", "controller": {"lastTickAt": None, "healthy": False}}
    rollouts_tick_all()  # an idle installation: no rollout, the periodic tick still leaves its trace
    answer = anonymous_api.get(HEALTH)
    assert answer.status_code == 200
    body = answer.json()
    assert (body["database"], body["broker"]) == ("ok", "ok")
    assert body["controller"]["healthy"] is True
    assert body["controller"]["lastTickAt"].endswith("Z")
    with time_machine.travel(timezone.now() + timedelta(seconds=89), tick=False):
        assert anonymous_api.get(HEALTH).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(seconds=91), tick=False):
        answer = anonymous_api.get(HEALTH)
        assert (answer.status_code, answer.json()["controller"]["healthy"]) == (503, False)


def test_an_unreachable_broker_is_a_503_with_the_same_body(anonymous_api, settings):
    periodic_tick_ensure(every=30, reset=True)
    rollouts_tick_all()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for url in (f"redis://127.0.0.1:{port}/0", f"amqp://guest:guest@127.0.0.1:{port}//"):
        settings.CELERY_BROKER_URL = url
        answer = anonymous_api.get(HEALTH)
        assert answer.status_code == 503, url
        assert answer.json()["broker"] == "unavailable"
        assert (answer.json()["database"], answer.json()["controller"]["healthy"]) == ("ok", True)
    if os.environ.get("AMQP_URL", "").startswith("amqp://"):  # make test's RabbitMQ (the machine's, read only here)
        settings.CELERY_BROKER_URL = os.environ["AMQP_URL"]
        assert anonymous_api.get(HEALTH).status_code == 200
    settings.CELERY_BROKER_URL = "filesystem://"  # the demo's embedded broker: nothing to lose
    assert anonymous_api.get(HEALTH).json()["broker"] == "ok"


def test_never_sooner_than_ten_seconds(anonymous_api, settings):
    settings.ROLLOUT = rollout_settings(every=1)
    periodic_tick_ensure(every=1, reset=True)
    rollouts_tick_all()
    with time_machine.travel(timezone.now() + timedelta(seconds=9), tick=False):
        assert anonymous_api.get(HEALTH).json()["controller"]["healthy"] is True
    with time_machine.travel(timezone.now() + timedelta(seconds=11), tick=False):
        assert anonymous_api.get(HEALTH).json()["controller"]["healthy"] is False


def test_last_tick_at_is_null_until_the_first_tick(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.25")})
    rollout = create(api)
    assert rollout["lastTickAt"] is None
    from rollout.models import Rollout

    model = Rollout.objects.get(pk=rollout["id"])
    tick(model)
    assert shown(api, rollout["id"])["lastTickAt"] == model.last_tick_at.isoformat().replace("+00:00", "Z")


def test_no_controller_comes_first_on_the_rollout_and_its_pending_rows(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.25")})  # one slot: after a tick, 1 in flight and 3 pending (budget_full)
    rollout = create(api)
    created = timezone.now()
    with time_machine.travel(created + timedelta(seconds=89), tick=False):
        assert (shown(api, rollout["id"])["blocker"] or {}).get("code") != "no_controller"
    with time_machine.travel(created + timedelta(seconds=91), tick=False):
        blocker = shown(api, rollout["id"])["blocker"]
        assert blocker["code"] == "no_controller"
        assert blocker["lastTickAt"] is None
        assert "celery -A project beat" in blocker["detail"]
        assert row_codes(api, rollout["id"]) == {"pending": {"no_controller"}}
        heartbeat_all()
        from rollout.models import Rollout

        tick(Rollout.objects.get(pk=rollout["id"]))
        assert shown(api, rollout["id"])["blocker"] is None or shown(api, rollout["id"])["blocker"]["code"] != (
            "no_controller"
        )
        ticked_at = shown(api, rollout["id"])["lastTickAt"]
    with time_machine.travel(created + timedelta(seconds=91 + 91), tick=False):
        blocker = shown(api, rollout["id"])["blocker"]
        assert (blocker["code"], blocker["lastTickAt"]) == ("no_controller", ticked_at)
        codes = row_codes(api, rollout["id"])
        assert codes["pending"] == {"no_controller"}
        assert codes["in_flight"] == {"awaiting_rejoin"}  # in flight: it waits for its agent, as before


def test_a_paused_rollout_is_not_held_by_a_missing_controller(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    rollout = create(api)
    rollout_pause(rollout_id=rollout["id"], tenant=tenant)
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        assert shown(api, rollout["id"])["blocker"]["code"] == "paused"
        assert row_codes(api, rollout["id"]) == {"pending": {"rollout_paused"}}
