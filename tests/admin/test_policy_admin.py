"""The admin's side of the rollout policy: the pool's window form and next window, promote, the gate option."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from fleet.models import AuditEntry, Pool
from rollout.models import Rollout, RolloutEvent
from tests.admin.conftest import make_rollout
from tests.admin.test_rollouts import action_url, detail, flash
from tests.rollout.helpers import in_flight, rejoin, tick

pytestmark = pytest.mark.django_db

WINDOWS = '[{"days": ["mon"], "start": "10:00", "durationMinutes": 60, "timezone": "Europe/Berlin"}]'


def pool_form(pool: Pool, windows: str) -> dict:
    return {
        "name": pool.name,
        "disruption_budget": str(pool.disruption_budget),
        "maintenance_windows": windows,
        "default_daemon_version": "",
    }


@pytest.fixture
def pool(tenant) -> Pool:
    return Pool.objects.create(tenant=tenant, name="gpu-a")


def test_the_pool_form_validates_windows_like_the_api(root, pool):
    url = f"/admin/fleet/pool/{pool.pk}/change/"
    bad = '[{"days": ["mon"], "start": "25:00", "durationMinutes": 60}]'
    response = root.post(url, pool_form(pool, bad))
    assert response.status_code == 200
    body = response.content.decode()
    assert "invalid_window" in body
    assert "policy.maintenanceWindows[0].start" in body
    pool.refresh_from_db()
    assert pool.maintenance_windows == []
    assert not AuditEntry.objects.filter(action="pool.update").exists()

    response = root.post(url, pool_form(pool, WINDOWS))
    assert response.status_code == 302
    pool.refresh_from_db()
    assert pool.maintenance_windows == [
        {"days": ["mon"], "start": "10:00", "durationMinutes": 60, "timezone": "Europe/Berlin"}
    ]
    entry = AuditEntry.objects.get(action="pool.update")
    assert entry.after == {"policy": {"maintenanceWindows": pool.maintenance_windows}}
    assert entry.actor_via == "admin"


def test_a_pool_added_in_the_admin_keeps_its_windows(root, tenant):
    data = {**pool_form(Pool(name="new", disruption_budget="0.05"), WINDOWS), "tenant": tenant.pk}
    assert root.post("/admin/fleet/pool/add/", data).status_code == 302
    assert Pool.objects.get(name="new").maintenance_windows[0]["start"] == "10:00"


def test_the_pool_list_shows_the_next_window(root, tenant, pool):
    Pool.objects.create(tenant=tenant, name="always")
    Pool.objects.filter(pk=pool.pk).update(
        maintenance_windows=[{"days": ["mon"], "start": "10:00", "durationMinutes": 60, "timezone": "UTC"}]
    )
    with time_machine.travel(datetime(2026, 6, 2, 9, 0, tzinfo=UTC), tick=False):  # a Tuesday
        body = root.get("/admin/fleet/pool/").content.decode()
    assert "Next window" in body
    assert "2026-06-08 10:00 UTC" in body  # next Monday
    assert "always open" in body
    with time_machine.travel(datetime(2026, 6, 8, 10, 30, tzinfo=UTC), tick=False):
        body = root.get("/admin/fleet/pool/").content.decode()
    assert "open now (until 2026-06-08 11:00 UTC)" in body


@pytest.fixture
def soaking(tenant, releases) -> Rollout:
    rollout = make_rollout(tenant, {"gpu-a": (4, "1")}, waves=[50, 100], soak_seconds=3600)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    assert rollout.next_wave_at is not None
    return rollout


def test_the_promote_button_is_shown_while_soaking_and_confirmed(root, soaking):
    page = root.get(detail(soaking)).content.decode()
    assert action_url(soaking, "promote") in page
    confirmation = root.get(action_url(soaking, "promote"))
    assert confirmation.status_code == 200
    assert "are you sure" in confirmation.content.decode()
    assert not RolloutEvent.objects.filter(rollout=soaking, kind="rollout.promoted").exists()  # GET writes nothing
    response = root.post(action_url(soaking, "promote"))
    assert response.status_code == 302
    assert any("Promoted" in message for message in flash(response))
    assert RolloutEvent.objects.filter(rollout=soaking, kind="rollout.promoted").count() == 1
    assert AuditEntry.objects.get(action="rollout.promote").actor_via == "admin"
    # The soak is over: no button any more, and a second POST is refused with its code.
    assert action_url(soaking, "promote") not in root.get(detail(soaking)).content.decode()
    response = root.post(action_url(soaking, "promote"))
    assert any("invalid_state" in message for message in flash(response))


def test_the_promote_button_is_shown_for_a_soak_no_tick_has_recorded_yet(root, tenant, releases):
    """The wave's last node settled after the last tick: the page says it soaks, and its button promotes."""
    rollout = make_rollout(tenant, {"gpu-a": (4, "1")}, waves=[50, 100], soak_seconds=3600)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    page = root.get(detail(rollout)).content.decode()
    assert action_url(rollout, "promote") in page
    rollout.refresh_from_db()
    assert rollout.next_wave_at is None  # showing the page wrote nothing
    response = root.post(action_url(rollout, "promote"))
    assert any("Promoted" in message for message in flash(response))
    assert RolloutEvent.objects.filter(rollout=rollout, kind="rollout.promoted").count() == 1


def test_no_promote_button_while_the_wave_runs(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (4, "1")}, waves=[50, 100], soak_seconds=3600)
    tick(rollout)
    page = root.get(detail(rollout)).content.decode()
    assert action_url(rollout, "pause") in page
    assert action_url(rollout, "promote") not in page


def test_the_create_form_takes_the_minimum_sample(root, tenant, releases):
    pool = make_rollout(tenant, {"gpu-b": (2, "1")}).pools.get()
    Rollout.objects.all().delete()
    form = {
        "tenant": tenant.pk,
        "version": "1.0.0",
        "pools": [pool.pk],
        "waves": "100",
        "max_failure_ratio": "0.1",
        "failure_ratio_min_settled": "3",
        "soak_seconds": "0",
        "upgrade_timeout_seconds": "600",
    }
    add = "/admin/rollout/rollout/add/"
    assert "Judge failures after" in root.get(add).content.decode()
    preview = root.post(add, {**form, "_preview": "1"}).content.decode()
    assert 'id="rollout-min-settled">3 settled' in preview
    bad = root.post(add, {**form, "failure_ratio_min_settled": "-1", "_preview": "1"}).content.decode()
    assert "failureRatioMinSettled" in bad
    assert not Rollout.objects.exists()
    assert root.post(add, {**form, "_confirm": "1"}).status_code == 302
    assert Rollout.objects.get().failure_ratio_min_settled == 3
