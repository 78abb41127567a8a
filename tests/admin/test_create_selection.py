"""Planning a rollout to a selection, on a schedule, in the admin: matching nodes per pool before anything exists."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node
from rollout.models import NodeUpgrade, Rollout
from tests.admin.test_create import ADD, form_data, pools  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db


def test_the_preview_counts_matching_nodes_per_pool_and_confirm_schedules_it(root, tenant, pools):  # noqa: F811
    for pool, count in zip(pools, (3, 1), strict=True):
        ids = list(Node.objects.filter(pool=pool).order_by("name").values_list("id", flat=True)[:count])
        Node.objects.filter(id__in=ids).update(labels={"ring": "canary"})
    start = (timezone.now() + timedelta(days=1)).replace(microsecond=0, second=0)
    end = start + timedelta(days=4)
    data = form_data(
        tenant,
        pools,
        waves="100",
        selector="ring=canary",
        start_at=start.strftime("%Y-%m-%d %H:%M"),
        end_by=end.strftime("%Y-%m-%d %H:%M"),
        end_behavior="abort",
    )
    preview = root.post(ADD, {**data, "_preview": "1"})
    assert preview.status_code == 200, preview.content.decode()[:3000]
    assert not Rollout.objects.exists()
    assert [row["nodes"] for row in preview.context["plan_budgets"]] == [3, 1]  # matching nodes, per pool
    body = preview.content.decode()
    assert "<code>ring=canary</code>" in body
    assert 'id="rollout-schedule"' in body

    confirm = body.split('id="rollout-confirm-form"')[1]
    hidden: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', confirm):
        hidden.setdefault(name, []).append(html.unescape(value))
    response = root.post(ADD, {**hidden, "_confirm": "1"})
    assert response.status_code == 302
    rollout = Rollout.objects.get()
    assert (rollout.state, rollout.selector, rollout.start_at, rollout.end_by, rollout.end_behavior) == (
        "scheduled",
        "ring=canary",
        start,
        end,
        "abort",
    )
    assert NodeUpgrade.objects.filter(rollout=rollout).count() == 4

    listing = root.get("/admin/rollout/rollout/").content.decode()
    assert "scheduled" in listing
    detail = root.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    assert "End by" in detail
    assert "ring=canary" in detail


def test_a_bad_selector_or_schedule_in_the_admin_shows_its_code(root, tenant, pools):  # noqa: F811
    for extra, code in (
        ({"selector": "ring in (a"}, "invalid_selector"),
        ({"end_by": "2020-01-01 00:00"}, "invalid_schedule"),
        ({"selector": "nothing=here"}, "no_nodes"),
    ):
        response = root.post(ADD, {**form_data(tenant, pools, **extra), "_preview": "1"})
        assert response.status_code == 200
        assert f"<code>{code}</code>" in response.content.decode()
    assert not Rollout.objects.exists()
