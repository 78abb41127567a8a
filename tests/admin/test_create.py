"""Creating a rollout from the admin: a form, a preview from rollout_plan that writes nothing, a confirmation."""

from __future__ import annotations

import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Pool
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutWave
from tests.admin.conftest import make_rollout
from tests.factories import fleet

pytestmark = pytest.mark.django_db

ADD = "/admin/rollout/rollout/add/"


def form_data(tenant, pools, **overrides) -> dict:
    """The form's POST data, with overrides."""
    data = {
        "tenant": tenant.pk,
        "version": "1.0.0",
        "pools": [pool.pk for pool in pools],
        "waves": "10, 50, 100",
        "max_failure_ratio": "0.1",
        "soak_seconds": "60",
        "upgrade_timeout_seconds": "300",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def written() -> tuple[int, int, int, int]:
    return (
        Rollout.objects.count(),
        RolloutWave.objects.count(),
        NodeUpgrade.objects.count(),
        RolloutEvent.objects.count(),
    )


@pytest.fixture
def pools(tenant, releases) -> list[Pool]:
    made = fleet(tenant, {"gpu-a": (10, "0.2"), "gpu-b": (10, "0.1")})
    return [nodes[0].pool for nodes in made.values()]


def test_the_add_button_leads_to_the_form(root, pools):
    assert 'href="/admin/rollout/rollout/add/"' in root.get("/admin/rollout/rollout/").content.decode()
    body = root.get(ADD).content.decode()
    assert "Plan a rollout" in body
    assert 'name="tenant"' in body  # superusers pick the tenant
    assert "1.0.0 (sequence 2)" in body
    assert "acme / gpu-a (10 nodes)" in body
    assert 'value="1,10,50,100"' in body
    assert 'name="_preview"' in body


def test_preview_shows_the_plan_and_writes_nothing_then_confirm_creates(root, tenant, pools):
    before = written()
    with CaptureQueriesContext(connection) as queries:
        preview = root.post(ADD, {**form_data(tenant, pools), "_preview": "1"})
    assert preview.status_code == 200
    assert written() == before
    assert not any(q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) for q in queries)
    body = preview.content.decode()
    assert "Preview: roll out 1.0.0" in body
    # 20 nodes in waves of 10/50/100 %: 2, 8, 10 nodes; the columns are the pools.
    plan = preview.context["plan"]
    assert [wave.total for wave in plan.waves] == [2, 8, 10]
    assert '<th scope="col">gpu-a</th><th scope="col">gpu-b</th>' in body
    assert [sum(w["per_pool"]) for w in preview.context["plan_waves"]] == [2, 8, 10]
    # Estimated duration: rounds by budget x timeout + soak between waves.
    assert preview.context["estimate"] == _duration(plan.estimated_seconds)
    assert "Confirm: create the rollout" in body
    assert body.count('type="hidden" name="pools"') == 2

    # Confirm posts back the preview's hidden fields.
    confirm = preview.content.decode().split('id="rollout-confirm-form"')[1]
    hidden: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', confirm):
        hidden.setdefault(name, []).append(html.unescape(value))
    assert set(hidden) >= {"tenant", "version", "pools", "waves", "max_failure_ratio", "csrfmiddlewaretoken"}
    response = root.post(ADD, {**hidden, "_confirm": "1"})
    rollout = Rollout.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/admin/rollout/rollout/{rollout.pk}/change/"
    assert (rollout.tenant, rollout.release.version, rollout.state) == (tenant, "1.0.0", "active")
    assert rollout.waves == [10, 50, 100]
    assert (rollout.soak_seconds, rollout.upgrade_timeout_seconds) == (60, 300)
    assert rollout.created_by.username == "root"
    assert set(rollout.pools.all()) == set(pools)
    assert NodeUpgrade.objects.filter(rollout=rollout).count() == 20
    assert RolloutEvent.objects.filter(rollout=rollout, kind="rollout.created").exists()


def _duration(seconds):
    from rollout.admin import duration_text

    return duration_text(seconds)


def test_back_to_the_form_keeps_the_values(root, tenant, pools):
    response = root.post(ADD, {**form_data(tenant, pools, waves="5,100"), "_edit": "1"})
    assert response.status_code == 200
    assert 'value="5,100"' in response.content.decode()
    assert not Rollout.objects.exists()


def test_no_pool_ticked_means_every_pool_of_the_tenant(root, tenant, pools, other_tenant):
    fleet(other_tenant, {"theirs": (3, "1")})
    response = root.post(ADD, {**form_data(tenant, [], waves="100"), "_confirm": "1"})
    assert response.status_code == 302
    assert set(Rollout.objects.get().pools.all()) == set(pools)


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"waves": "50,10,100"}, "invalid_waves"),
        ({"waves": "10,50"}, "invalid_waves"),
        ({"max_failure_ratio": "1.5"}, "invalid_input"),
        ({"upgrade_timeout_seconds": "0"}, "invalid_input"),
    ],
)
@pytest.mark.parametrize("step", ["_preview", "_confirm"])
def test_service_refusals_show_code_and_detail(root, tenant, pools, overrides, code, step):
    response = root.post(ADD, {**form_data(tenant, pools, **overrides), step: "1"})
    assert response.status_code == 200
    errors = response.context["form"].non_field_errors()
    assert len(errors) == 1
    assert f"<code>{code}</code>: " in errors[0]
    assert f"<code>{code}</code>" in response.content.decode()
    assert not Rollout.objects.exists()


def test_conflict_and_no_nodes_are_reported(root, tenant, pools):
    make_rollout(tenant, {"busy": (2, "1")})
    busy = Pool.objects.get(name="busy")
    response = root.post(ADD, {**form_data(tenant, [busy]), "_preview": "1"})
    assert "<code>conflict</code>: 2 nodes are already held by an active rollout" in response.content.decode()
    empty = Pool.objects.create(tenant=tenant, name="empty")
    response = root.post(ADD, {**form_data(tenant, [empty]), "_confirm": "1"})
    assert "<code>no_nodes</code>" in response.content.decode()
    assert Rollout.objects.count() == 1


def test_unparseable_input_is_a_form_error(root, tenant, pools):
    response = root.post(ADD, {**form_data(tenant, pools, waves="10, half, 100"), "_preview": "1"})
    assert "&#x27;half&#x27; is not a percentage." in response.content.decode()
    response = root.post(ADD, {**{**form_data(tenant, pools), "tenant": ""}, "_preview": "1"})
    assert response.context["form"].errors["tenant"]


def test_a_superuser_cannot_mix_tenants(root, tenant, pools, other_tenant):
    theirs = fleet(other_tenant, {"theirs": (3, "1")})["theirs"][0].pool
    response = root.post(ADD, {**form_data(tenant, [pools[0], theirs]), "_confirm": "1"})
    assert response.context["form"].errors["pools"] == ["Not pools of acme: theirs."]
    assert not Rollout.objects.exists()


def test_staff_create_in_their_tenant_only(staff, tenant, pools, other_tenant):
    theirs = fleet(other_tenant, {"theirs": (3, "1")})["theirs"][0].pool
    body = staff.get(ADD).content.decode()
    assert 'name="tenant"' not in body
    assert "gpu-a (10 nodes)" in body
    assert "theirs" not in body
    # Another tenant's pool is not a choice.
    response = staff.post(ADD, {**form_data(tenant, [theirs]), "_confirm": "1"})
    assert "pools" in response.context["form"].errors
    # The tenant in the data is ignored: they act in their own.
    response = staff.post(ADD, {**form_data(other_tenant, pools), "_confirm": "1"})
    assert response.status_code == 302
    rollout = Rollout.objects.get()
    assert rollout.tenant == tenant
    assert rollout.created_by.username == "staff"
