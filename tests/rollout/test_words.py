"""Every refusal built from a rollout's state reads as English (docs/api.md#errors): "An active rollout cannot
be started.", "A rollout awaiting approval cannot be paused.", never "A active" nor a state's code; a wave
named in a detail counts from 1."""

from __future__ import annotations

import re

import pytest

from rollout.models import Rollout
from rollout.words import a_rollout, cannot_be
from tests.factories import fleet
from tests.rollout.test_approvals import APPROVE, key

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


@pytest.mark.parametrize("state", Rollout.State.values)
def test_every_state_in_words(state):
    sentence = cannot_be(state, "paused")
    assert "_" not in sentence
    assert not re.search(r"\bA [aeiou]", sentence)  # "A active"
    assert not re.search(r"\bAn [^aeiou]", sentence)
    assert a_rollout(state).endswith("rollout") or a_rollout(state).startswith("a rollout ")


def test_words_of_the_states(db):
    assert cannot_be("active", "started") == "An active rollout cannot be started."
    assert cannot_be("awaiting_approval", "paused") == "A rollout awaiting approval cannot be paused."
    assert cannot_be("aborted", "promoted") == "An aborted rollout cannot be promoted."
    assert a_rollout("some_new_state") == "a rollout some new state"  # a phrase stands after "rollout"
    assert a_rollout("superseded") == "a superseded rollout"


def _as(state: str) -> dict:
    extra = {"paused": {"paused_reason": "operator"}, "awaiting_approval": {"approvals_required": 1}}
    return {"state": state, **extra.get(state, {})}


@pytest.mark.parametrize(
    ("state", "action", "detail"),
    [
        ("active", "start", "An active rollout cannot be started."),
        ("awaiting_approval", "pause", "A rollout awaiting approval cannot be paused."),
        ("awaiting_approval", "promote", "A rollout awaiting approval cannot be promoted."),
        ("active", "approve", "An active rollout cannot be approved: it does not await approval."),
    ],
)
def test_the_api_says_it_in_english(api, tenant, releases, state, action, detail):
    fleet(tenant, {"a": (2, "0.5")})
    rollout_id = api.post(URL, {"version": "1.0.0"}, format="json").json()["id"]
    Rollout.objects.filter(pk=rollout_id).update(**_as(state))
    body = {"comment": "ok"} if action == "approve" else {}
    client = key(tenant, "alice", APPROVE) if action == "approve" else api
    response = client.post(f"{URL}{rollout_id}/{action}/", body, format="json")
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["detail"]) == ("invalid_state", detail)


def test_promote_names_the_wave_from_1(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.5")})
    rollout_id = api.post(URL, {"version": "1.0.0", "waves": [50, 100]}, format="json").json()["id"]
    response = api.post(f"{URL}{rollout_id}/promote/", {}, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["detail"] == "Wave 1 of 2 is not soaking: there is nothing to promote."
