"""PATCH /api/compute/pools/{id}/ and maintenance windows on create (docs/api.md#pools)."""

from __future__ import annotations

import pytest

from fleet.models import AuditEntry, Pool

pytestmark = pytest.mark.django_db

POOLS = "/api/compute/pools/"
NIGHTS = [{"days": ["mon", "tue"], "start": "22:00", "durationMinutes": 240, "timezone": "Europe/Berlin"}]


def pool_url(pool_id: str) -> str:
    return f"{POOLS}{pool_id}/"


@pytest.fixture
def pool(api) -> dict:
    response = api.post(POOLS, {"name": "gpu-a", "policy": {"disruptionBudget": 0.1}}, format="json")
    assert response.status_code == 201
    return response.json()


def test_patch_replaces_the_given_policy_fields_and_is_audited(api, pool):
    response = api.patch(pool_url(pool["id"]), {"policy": {"maintenanceWindows": NIGHTS}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["policy"] == {"disruptionBudget": 0.1, "maintenanceWindows": NIGHTS}
    assert api.get(pool_url(pool["id"])).json()["policy"]["maintenanceWindows"] == NIGHTS
    entry = AuditEntry.objects.get(action="pool.update")
    assert entry.object_id == pool["id"]
    assert entry.before == {"policy": {"maintenanceWindows": []}}
    assert entry.after == {"policy": {"maintenanceWindows": NIGHTS}}

    # Only the given field changes; the timezone defaults to UTC and days come back in week order.
    response = api.patch(pool_url(pool["id"]), {"policy": {"disruptionBudget": 0.25}}, format="json")
    assert response.json()["policy"] == {"disruptionBudget": 0.25, "maintenanceWindows": NIGHTS}
    windows = [{"days": ["sun", "mon"], "start": "01:00", "durationMinutes": 60}]
    response = api.patch(pool_url(pool["id"]), {"policy": {"maintenanceWindows": windows}}, format="json")
    assert response.json()["policy"]["maintenanceWindows"] == [
        {"days": ["mon", "sun"], "start": "01:00", "durationMinutes": 60, "timezone": "UTC"}
    ]
    # Empty (or null): always open again.
    response = api.patch(pool_url(pool["id"]), {"policy": {"maintenanceWindows": None}}, format="json")
    assert response.json()["policy"]["maintenanceWindows"] == []
    assert AuditEntry.objects.filter(action="pool.update").count() == 4


BAD_WINDOWS = [
    ("not a list", "policy.maintenanceWindows"),
    ([{"days": ["mon"], "start": "24:00", "durationMinutes": 60}], "policy.maintenanceWindows[0].start"),
    ([{"days": ["mon"], "start": "9:00", "durationMinutes": 60}], "policy.maintenanceWindows[0].start"),
    ([{"days": [], "start": "09:00", "durationMinutes": 60}], "policy.maintenanceWindows[0].days"),
    ([{"days": ["mon", "mon"], "start": "09:00", "durationMinutes": 60}], "policy.maintenanceWindows[0].days[1]"),
    ([{"days": ["monday"], "start": "09:00", "durationMinutes": 60}], "policy.maintenanceWindows[0].days[0]"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 0}], "policy.maintenanceWindows[0].durationMinutes"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 10081}], "policy.maintenanceWindows[0].durationMinutes"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 60.0}], "policy.maintenanceWindows[0].durationMinutes"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": True}], "policy.maintenanceWindows[0].durationMinutes"),
    (
        [{"days": ["mon"], "start": "09:00", "durationMinutes": 60, "timezone": "Mars/Olympus"}],
        "policy.maintenanceWindows[0].timezone",
    ),
    (
        [{"days": ["mon"], "start": "09:00", "durationMinutes": 60, "timezone": "localtime"}],
        "policy.maintenanceWindows[0].timezone",
    ),
    ([{"days": ["mon"], "start": "09:00"}], "policy.maintenanceWindows[0].durationMinutes"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 5, "tz": "UTC"}], "policy.maintenanceWindows[0].tz"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 5}, 7], "policy.maintenanceWindows[1]"),
    ([{"days": ["mon"], "start": "09:00", "durationMinutes": 5}] * 33, "policy.maintenanceWindows"),
]


@pytest.mark.parametrize(("windows", "field"), BAD_WINDOWS)
def test_bad_windows_are_refused_naming_the_field_and_nothing_changes(api, pool, windows, field):
    body = {"policy": {"disruptionBudget": 0.5, "maintenanceWindows": windows}}
    response = api.patch(pool_url(pool["id"]), body, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "invalid_window"
    assert error["field"] == field
    assert error["detail"].startswith(field + " ")
    stored = Pool.objects.get(pk=pool["id"])
    assert (float(stored.disruption_budget), stored.maintenance_windows) == (0.1, [])
    assert not AuditEntry.objects.filter(action="pool.update").exists()
    # The same refusal on create, which creates nothing.
    response = api.post(POOLS, {"name": "new", **body}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_window")
    assert not Pool.objects.filter(name="new").exists()


@pytest.mark.parametrize(
    "body",
    [
        {"policy": {"maintenanceWindow": []}},  # a typo
        {"policy": {"disruptionBudget": 2}},
        {"policy": {"disruptionBudget": "0.1"}},
        {"name": "renamed", "policy": {}},
        {},
        {"policy": []},
    ],
)
def test_other_bad_patches_are_refused_and_change_nothing(api, pool, body):
    response = api.patch(pool_url(pool["id"]), body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] in {"invalid_input", "invalid_budget"}
    stored = Pool.objects.get(pk=pool["id"])
    assert (stored.name, float(stored.disruption_budget)) == ("gpu-a", 0.1)
    assert not AuditEntry.objects.filter(action="pool.update").exists()


def test_patch_of_another_tenants_pool_is_not_found(api, other_api, pool):
    body = {"policy": {"maintenanceWindows": NIGHTS}}
    assert other_api.patch(pool_url(pool["id"]), body, format="json").status_code == 404
    assert api.patch(pool_url("not-a-uuid"), body, format="json").status_code == 404
    assert Pool.objects.get(pk=pool["id"]).maintenance_windows == []


def test_create_with_windows(api):
    response = api.post(POOLS, {"name": "w", "policy": {"maintenanceWindows": NIGHTS}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["policy"] == {"disruptionBudget": 0.05, "maintenanceWindows": NIGHTS}
    entry = AuditEntry.objects.get(action="pool.create")
    assert entry.after["policy"]["maintenanceWindows"] == NIGHTS
