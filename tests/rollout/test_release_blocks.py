"""Blocking a release per tenant (docs/controller.md#blocking-a-release-per-tenant)."""

import pytest

from fleet.models import AuditEntry
from rollout.models import ReleaseBlock, Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet, signed
from tests.rollout.helpers import tick

pytestmark = pytest.mark.django_db

BLOCK = "/api/compute/releases/{}/block/"
UNBLOCK = "/api/compute/releases/{}/unblock/"


def rows(response):
    body = response.json()
    return body["results"] if isinstance(body, dict) else body


def create(tenant):
    return rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[50, 100], soak_seconds=0))


def test_block_answers_the_release_with_blocked_and_every_representation_carries_it(api, other_api, releases):
    listed = rows(api.get("/api/compute/releases/"))
    assert [release["blocked"] for release in listed] == [None, None]
    response = api.post(BLOCK.format("1.0.0"), {"reason": "crashes on arm"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["version"] == "1.0.0"
    assert body["blocked"]["reason"] == "crashes on arm"
    assert body["blocked"]["by"] == "ops"
    assert body["blocked"]["at"]
    listed = {release["version"]: release["blocked"] for release in rows(api.get("/api/compute/releases/"))}
    assert listed["1.0.0"] == body["blocked"]
    assert listed["0.9.0"] is None
    # Another tenant sees it unblocked.
    assert {r["version"]: r["blocked"] for r in rows(other_api.get("/api/compute/releases/"))}["1.0.0"] is None
    # Register's answer (the same manifest again) carries it too.
    from tests.factories import manifest

    again = api.post(
        "/api/compute/releases/", signed(manifest("1.0.0", 2, archs=("amd64",))), content_type="application/json"
    )
    assert again.status_code == 200
    assert again.json()["blocked"]["reason"] == "crashes on arm"


def test_block_twice_unblock_unknown_and_bad_reasons(api, releases):
    assert api.post(UNBLOCK.format("1.0.0"), format="json").status_code == 409
    assert api.post(UNBLOCK.format("1.0.0"), format="json").json()["code"] == "invalid_state"
    assert api.post(BLOCK.format("9.9.9"), {"reason": "x"}, format="json").status_code == 404
    for bad in [{}, {"reason": ""}, {"reason": "x" * 501}, {"reason": 5}, {"reason": "x", "y": 1}]:
        response = api.post(BLOCK.format("1.0.0"), bad, format="json")
        assert response.status_code == 400, bad
        assert response.json()["code"]
    assert not ReleaseBlock.objects.exists()
    assert api.post(BLOCK.format("1.0.0"), {"reason": "x" * 500}, format="json").status_code == 200
    second = api.post(BLOCK.format("1.0.0"), {"reason": "again"}, format="json")
    assert (second.status_code, second.json()["code"]) == (409, "invalid_state")
    unblocked = api.post(UNBLOCK.format("1.0.0"), format="json")
    assert unblocked.status_code == 200
    assert unblocked.json()["blocked"] is None
    assert not ReleaseBlock.objects.exists()
    actions = list(AuditEntry.objects.order_by("seq").values_list("action", flat=True))
    assert actions[-2:] == ["release.block", "release.unblock"]


def test_block_pauses_a_running_rollout_within_one_tick_refuses_resume_and_create(
    api, other_api, tenant, other_tenant, releases
):
    fleet(tenant, {"a": (4, "0.25")})
    fleet(other_tenant, {"b": (4, "0.25")})
    rollout = create(tenant)
    theirs = create(other_tenant)
    tick(rollout)
    tick(theirs)
    assert api.post(BLOCK.format("1.0.0"), {"reason": "bad"}, format="json").status_code == 200
    result = tick(rollout)
    assert result.paused
    assert result.started == 0
    assert (rollout.state, rollout.paused_reason) == ("paused", "release_blocked")
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/").json()
    assert (shown["state"], shown["pausedReason"]) == ("paused", "release_blocked")
    resume = api.post(f"/api/compute/rollouts/{rollout.id}/resume/", format="json")
    assert (resume.status_code, resume.json()["code"]) == (409, "release_blocked")
    refused = api.post("/api/compute/rollouts/", {"version": "1.0.0"}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (400, "release_blocked")
    dry = api.post("/api/compute/rollouts/?dryRun=true", {"version": "1.0.0"}, format="json")
    assert (dry.status_code, dry.json()["code"]) == (400, "release_blocked")
    # The other tenant goes on.
    tick(theirs)
    assert theirs.state == "active"
    assert other_api.post(BLOCK.format("1.0.0"), {"reason": "theirs too"}, format="json").status_code == 200
    assert other_api.post(UNBLOCK.format("1.0.0"), format="json").status_code == 200
    # Unblocking lets the operator resume; abort works while blocked too.
    assert api.post(UNBLOCK.format("1.0.0"), format="json").status_code == 200
    rollout.refresh_from_db()
    assert rollout.state == "paused"  # unblocking resumes nothing by itself
    resumed = api.post(f"/api/compute/rollouts/{rollout.id}/resume/", format="json")
    assert (resumed.status_code, resumed.json()["state"]) == (200, "active")
    assert api.post(BLOCK.format("1.0.0"), {"reason": "bad again"}, format="json").status_code == 200
    aborted = api.post(f"/api/compute/rollouts/{rollout.id}/abort/", {}, format="json")
    assert (aborted.status_code, aborted.json()["state"]) == (200, "aborted")
    assert Rollout.objects.filter(tenant=tenant).count() == 1


def test_block_needs_the_grant(ungranted_api, releases):
    assert ungranted_api.post(BLOCK.format("1.0.0"), {"reason": "x"}, format="json").status_code == 403
    assert not ReleaseBlock.objects.exists()


def test_a_reason_is_any_1_to_500_characters(api, releases):
    response = api.post(BLOCK.format("1.0.0"), {"reason": " "}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["blocked"]["reason"] == " "
