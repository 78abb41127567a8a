"""The console reads like a tool (docs/console.md): budgets in %, right plurals, worst case said, no stale
next wave, no Delete on a node whose agent holds a session."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet.models import Node, NodeSession, Pool
from rollout.models import Release, Rollout
from rollout.rollouts.actions import rollout_abort
from tests.admin.conftest import make_rollout

pytestmark = pytest.mark.django_db


def test_budgets_and_the_failure_ratio_read_in_percent(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (4, "0.05"), "gpu-b": (2, "0.125")}, max_failure_ratio=0.1)
    page = root.get("/admin/fleet/pool/").content.decode()
    assert "5 %" in page
    assert "12.5 %" in page
    assert "0.05000" not in page
    detail = root.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    assert "<td>5 %</td>" in detail
    assert '<div class="readonly">10 %</div>' in detail  # the max failure ratio
    assert "0.10000" not in detail


def test_release_binaries_is_spelled_right(root, releases):
    page = root.get(f"/admin/rollout/release/{Release.objects.first().pk}/change/").content.decode()
    assert "release binaries" in page.lower()
    assert "binarys" not in page.lower()


def test_the_estimate_says_it_is_a_worst_case(root, tenant, releases):
    make_rollout(tenant, {"a": (2, "1")})
    Rollout.objects.all().delete()
    pool = Pool.objects.get(name="a")
    response = root.post(
        "/admin/rollout/rollout/add/",
        {"tenant": tenant.pk, "version": "1.0.0", "pools": [pool.pk], "waves": "100", "max_failure_ratio": "0.1",
         "soak_seconds": "0", "upgrade_timeout_seconds": "600", "min_ready_seconds": "0",
         "failure_ratio_min_settled": "0", "_preview": "1"},
    )  # fmt: skip
    assert "Estimated duration (worst case)" in response.content.decode()


def test_no_next_wave_time_after_an_abort(root, tenant, releases):
    rollout = make_rollout(tenant, {"a": (2, "1")})
    Rollout.objects.filter(pk=rollout.pk).update(next_wave_at=timezone.now())
    rollout_abort(rollout_id=rollout.pk, tenant=tenant)
    page = root.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    assert timezone.now().strftime("%Y-%m-%d %H:") not in page.split("Next wave at")[1][:300]


def test_a_node_whose_agent_holds_a_session_cannot_be_deleted(root, tenant, releases):
    make_rollout(tenant, {"a": (2, "1")})
    joined, gone = Node.objects.order_by("name")
    NodeSession.objects.filter(node=gone).update(left_at=timezone.now())
    assert root.get(f"/admin/fleet/node/{joined.pk}/delete/").status_code == 403
    assert b"deletelink" not in root.get(f"/admin/fleet/node/{joined.pk}/change/").content
    assert root.get(f"/admin/fleet/node/{gone.pk}/delete/").status_code == 200


def test_events_name_pools_not_ids(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (2, "1")})
    pool = Pool.objects.get(name="gpu-a")
    page = root.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    events = page[page.index('id="rollout-events"') :]
    assert "gpu-a" in events
    assert str(pool.pk) not in events


def test_a_refused_console_page_is_styled_like_the_console():
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_user("viewer", "v@example.com", None, is_staff=True)
    client = Client()
    client.force_login(user)
    response = client.get("/admin/rollout/release/add/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "admin/css/base.css" in page
    assert "Permission denied" in page


def test_the_node_page_folds_the_signed_envelope(root, tenant, releases):
    from tests.rollout.helpers import tick

    rollout = make_rollout(tenant, {"a": (1, "1")})
    tick(rollout)  # the node's spec now carries the signed release
    node = Node.objects.get()
    page = root.get(f"/admin/fleet/node/{node.pk}/change/").content.decode()
    assert "<details><summary>signed release envelope</summary>" in page
    assert page.index("payloadType") > page.index("<details>")
    listing = root.get("/admin/fleet/node/").content.decode()
    assert "payloadType" not in listing
    assert "1.0.0" in listing
