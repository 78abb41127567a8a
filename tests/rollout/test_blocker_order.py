"""The blockers' order (docs/controller.md#why-not-yet): a rollout and its rows say the same
thing, ``gate`` right after ``rollout_paused``, even during a soak."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rollout.models import RolloutGate
from tests.factories import fleet
from tests.rollout.helpers import create, in_flight, rejoin, tick

pytestmark = pytest.mark.django_db


def fresh_pass(rollout) -> None:
    now = timezone.now()
    RolloutGate.objects.filter(rollout=rollout).update(state="pass", at=now, fresh_until=now + timedelta(hours=1))


def blockers(api, rollout) -> tuple[str, dict[int, set[str]]]:
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/").json()["blocker"]
    rows = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/", {"limit": 100}).json()["results"]
    by_wave: dict[int, set[str]] = {}
    for row in rows:
        if row["blocker"] is not None:
            by_wave.setdefault(row["wave"], set()).add(row["blocker"]["code"])
    return (shown["code"] if shown else None), by_wave


def test_a_stale_gate_during_a_soak_holds_the_rollout_and_its_next_wave(api, tenant, releases, settings):
    settings.ROLLOUT_PROMETHEUS_URL = "http://127.0.0.1:9"
    fleet(tenant, {"a": (6, "1")})
    gate = {"name": "errors", "prometheus": {"query": "errors", "max": 1}}
    rollout = create(tenant, waves=[34, 67, 100], soak_seconds=300, gates=[gate], max_failure_ratio=1)
    fresh_pass(rollout)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)  # wave 1 of 3 settled: it soaks
    assert rollout.next_wave_at is not None
    # A fresh gate: the soak holds the rollout and every later row.
    assert blockers(api, rollout) == ("soaking", {1: {"soaking"}, 2: {"soaking"}})
    # The gate's pass grows stale during the soak: the rollout says gate, and so do the rows of the wave that
    # starts when the soak ends; the later wave still waits for the soak.
    RolloutGate.objects.filter(rollout=rollout).update(fresh_until=timezone.now() - timedelta(seconds=1))
    assert blockers(api, rollout) == ("gate", {1: {"gate"}, 2: {"soaking"}})
