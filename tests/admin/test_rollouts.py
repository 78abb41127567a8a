"""The rollout list and detail pages, tenant scoping, and the actions with their confirmation."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Workflow
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from rollout.rollouts.actions import rollout_pause
from tests.admin.conftest import make_rollout, staff_client
from tests.rollout.helpers import rejoin, states, tick

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/rollout/"


def detail(rollout: Rollout) -> str:
    return f"{LIST}{rollout.pk}/change/"


def action_url(rollout: Rollout, slug: str) -> str:
    return f"{LIST}{rollout.pk}/{slug}/"


def flash(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.fixture
def running(tenant, releases) -> Rollout:
    """10 nodes, budget 0.2 (2 at a time), waves 10/50/100: wave 0 has 1 node, which succeeded;
    wave 1 has 4 nodes: 2 in flight, 2 pending."""
    rollout = make_rollout(tenant, {"gpu-a": (10, "0.2")}, waves=[10, 50, 100], soak_seconds=0)
    tick(rollout)
    rejoin(NodeUpgrade.objects.get(rollout=rollout, wave=0).node_id, "1.0.0")
    tick(rollout)
    assert states(rollout) == {"succeeded": 1, "in_flight": 2, "pending": 7}
    return rollout


def test_list_shows_version_state_wave_and_progress(root, running, other_tenant):
    make_rollout(other_tenant, {"gpu-z": (3, "1")})
    body = root.get(LIST).content.decode()
    assert "1.0.0" in body
    assert str(running.pk)[:8] in body
    assert "acme" in body
    assert "globex" in body
    assert "2 / 3" in body  # the second of three waves
    assert 'class="rollout-progress"' in body
    assert 'title="1 succeeded, 0 failed, 2 in flight, 7 pending, 0 skipped/cancelled/rolled back"' in body
    assert "rollout-seg-succeeded" in body
    assert "rollout-seg-in-flight" in body
    assert 'style="width: 10.000%"' in body  # 1 of 10 succeeded
    assert "Plan a rollout" in body
    # Filters by state and tenant.
    assert "?state__exact=paused" in body
    assert "tenant__id__exact" in body
    assert str(running.pk)[:8] not in root.get(LIST, {"state__exact": "paused"}).content.decode()
    assert str(running.pk)[:8] in root.get(LIST, {"state__exact": "active"}).content.decode()
    assert str(running.pk)[:8] not in root.get(LIST, {"tenant__id__exact": other_tenant.pk}).content.decode()


def test_detail_shows_waves_budget_events_and_buttons(root, running, tenant):
    Workflow.objects.create(
        tenant=tenant,
        node=NodeUpgrade.objects.filter(rollout=running, state="pending").first().node,
        pool=running.pools.get(),
        kind="remediation",
        state="active",
        started_at=timezone.now(),
    )
    response = root.get(detail(running))
    assert response.status_code == 200
    body = response.content.decode()
    # Waves with their bars and counts.
    assert body.count('class="rollout-progress"') == 4  # the total and one per wave
    assert "1 of 3" in body
    assert "2 of 3" in body
    assert "3 of 3" in body
    assert 'title="0 succeeded, 0 failed, 2 in flight, 2 pending, 0 skipped/cancelled/rolled back"' in body
    assert "(current)" in body
    # Budget in use per pool: 2 in flight + 1 workflow of 2 allowed.
    assert '<span class="rollout-budget">3/2</span>' in body
    # The event timeline and the link to the node upgrades.
    assert "rollout.created" in body
    assert "rollout.wave" in body
    assert f"/admin/rollout/nodeupgrade/?rollout={running.pk}" in body
    # Buttons of an active rollout.
    for slug in ("pause", "abort", "abort-rollback"):
        assert action_url(running, slug) in body
    assert action_url(running, "resume") not in body
    # Read-only: no save button.
    assert 'name="_save"' not in body


def test_staff_see_only_their_tenant(staff, running, other_tenant):
    theirs = make_rollout(other_tenant, {"gpu-z": (3, "1")})
    body = staff.get(LIST).content.decode()
    assert str(running.pk)[:8] in body
    assert str(theirs.pk)[:8] not in body
    assert "tenant__id__exact" not in body  # no tenant filter for staff
    assert staff.get(detail(running)).status_code == 200
    # Another tenant's rollout does not exist for them.
    response = staff.get(detail(theirs))
    assert response.status_code == 302
    assert "Perhaps it was deleted?" in " ".join(flash(response))
    assert staff.get(action_url(theirs, "pause")).status_code == 404
    assert staff.post(action_url(theirs, "abort")).status_code == 404
    staff.post(LIST, {"action": "abort_selected", "_selected_action": [theirs.pk], "post": "yes"})
    theirs.refresh_from_db()
    assert theirs.state == "active"
    upgrades = staff.get("/admin/rollout/nodeupgrade/", {"rollout": theirs.pk}).content.decode()
    assert "gpu-z" not in upgrades
    assert "gpu-z" not in staff.get("/admin/rollout/rolloutevent/").content.decode()


def test_staff_without_a_membership_see_nothing(client, running):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("loner", password=None, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="rollout"))
    client.force_login(user)
    assert str(running.pk)[:8] not in client.get(LIST).content.decode()
    assert client.get(action_url(running, "pause")).status_code == 403
    assert client.get(f"{LIST}add/").status_code == 403


def test_viewers_without_the_change_permission_cannot_operate(tenant, running):
    viewer = staff_client(tenant, "viewer", codenames=("view_rollout", "view_nodeupgrade"))
    body = viewer.get(detail(running)).content.decode()
    assert action_url(running, "pause") not in body
    assert viewer.get(action_url(running, "pause")).status_code == 403
    assert viewer.post(action_url(running, "pause")).status_code == 403
    assert 'value="pause_selected"' not in viewer.get(LIST).content.decode()
    assert viewer.get(f"{LIST}add/").status_code == 403
    running.refresh_from_db()
    assert running.state == "active"


@pytest.mark.parametrize(
    ("slug", "paused_first", "state", "event"),
    [
        ("pause", False, "paused", "rollout.paused"),
        ("resume", True, "active", "rollout.resumed"),
        ("abort", False, "aborted", "rollout.aborted"),
        ("abort-rollback", True, "aborted", "rollout.aborted"),
    ],
)
def test_detail_buttons_confirm_then_call_the_service(root, running, slug, paused_first, state, event):
    if paused_first:
        rollout_pause(rollout_id=running.pk)
    before = running.events.count()
    page = root.get(action_url(running, slug))
    assert page.status_code == 200
    assert b"are you sure?" in page.content
    assert b'name="post"' in page.content
    running.refresh_from_db()
    assert running.state == ("paused" if paused_first else "active")  # asking changes nothing
    assert running.events.count() == before

    response = root.post(action_url(running, slug), {"post": "yes"})
    assert response.status_code == 302
    assert response["Location"] == detail(running)
    running.refresh_from_db()
    assert running.state == state
    last = running.events.order_by("at", "id").last()
    assert (last.kind, last.data["actor"]) == (event, "admin:root")
    if slug == "abort-rollback":
        assert last.data["rollback"] is True
        assert states(running) == {"succeeded": 1, "rolled_back": 2, "cancelled": 7}
    if slug == "abort":
        assert states(running) == {"succeeded": 1, "in_flight": 2, "cancelled": 7}
    assert not any(m.startswith("1.0.0") and ":" in m for m in flash(response))


def test_list_action_asks_for_confirmation_then_pauses(staff, running, tenant):
    second = make_rollout(tenant, {"gpu-b": (4, "0.5")})
    selected = {"action": "pause_selected", "_selected_action": [running.pk, second.pk]}
    page = staff.post(LIST, selected)
    assert page.status_code == 200
    assert b"Pause: are you sure?" in page.content
    assert page.content.count(b'name="_selected_action"') == 2
    assert set(Rollout.objects.values_list("state", flat=True)) == {"active"}

    response = staff.post(LIST, {**selected, "post": "yes"})
    assert response.status_code == 302
    assert set(Rollout.objects.values_list("state", flat=True)) == {"paused"}
    assert RolloutEvent.objects.filter(kind="rollout.paused", data__actor="admin:staff").count() == 2
    assert "Paused 2 rollout(s)." in flash(response)


def test_an_invalid_action_is_an_error_message_and_changes_nothing(root, running):
    response = root.post(action_url(running, "resume"), {"post": "yes"}, follow=True)
    assert response.status_code == 200
    errors = [str(m) for m in response.context["messages"] if m.level_tag == "error"]
    assert len(errors) == 1
    assert "invalid_state" in errors[0]
    assert "cannot be resumed" in errors[0]
    running.refresh_from_db()
    assert running.state == "active"
    assert not running.events.filter(kind="rollout.resumed").exists()

    # The confirmation page warns first; the list action reports the same code.
    page = root.post(LIST, {"action": "resume_selected", "_selected_action": [running.pk]})
    assert b"will refuse this (invalid_state)" in page.content
    response = root.post(LIST, {"action": "resume_selected", "_selected_action": [running.pk], "post": "yes"})
    assert response.status_code == 302
    assert any("invalid_state" in m for m in flash(response))
    running.refresh_from_db()
    assert running.state == "active"


def test_finished_rollouts_offer_no_buttons_and_refuse_actions(root, running):
    root.post(action_url(running, "abort"), {"post": "yes"})
    body = root.get(detail(running)).content.decode()
    for slug in ("pause", "resume", "abort", "abort-rollback"):
        assert action_url(running, slug) not in body
    response = root.post(action_url(running, "abort"), {"post": "yes"}, follow=True)
    assert any("invalid_state" in str(m) for m in response.context["messages"])


def test_rollouts_are_never_edited_or_deleted_by_hand(root, running):
    assert root.post(detail(running), {"state": "completed"}).status_code == 403
    assert root.get(f"{LIST}{running.pk}/delete/").status_code == 403
    assert root.post(f"{LIST}{running.pk}/delete/", {"post": "yes"}).status_code == 403
    assert b'value="delete_selected"' not in root.get(LIST).content
    running.refresh_from_db()
    assert running.state == "active"


def test_the_list_takes_a_constant_number_of_queries(root, tenant, releases):
    for i in range(2):
        make_rollout(tenant, {f"few-{i}": (3, "0.5")})
    with CaptureQueriesContext(connection) as few:
        assert root.get(LIST).status_code == 200
    for i in range(8):
        rollout = make_rollout(tenant, {f"many-{i}": (5, "0.5")})
        tick(rollout)
    with CaptureQueriesContext(connection) as many:
        body = root.get(LIST).content.decode()
    assert body.count('class="rollout-progress"') == 10
    assert len(few) == len(many)


def test_the_event_list_is_read_only(root, running):
    body = root.get("/admin/rollout/rolloutevent/").content.decode()
    assert "rollout.created" in body
    event = running.events.first()
    assert root.get(f"/admin/rollout/rolloutevent/{event.pk}/change/").status_code == 200
    assert root.post(f"/admin/rollout/rolloutevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert root.get("/admin/rollout/rolloutevent/add/").status_code == 403
