"""Supersede under real parallel requests, on PostgreSQL: one wins, never two writers on a node.

See docs/controller.md#undoing-a-bad-release (Concurrency)."""

from __future__ import annotations

import pytest
from django.db.models import Count

from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from tests.concurrency import run_together
from tests.conftest import client_for
from tests.factories import fleet, manifest, release_stored
from tests.rollout.helpers import create, heartbeat_all, tick

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/compute/rollouts/"


def bad_rollout(tenant) -> Rollout:
    fleet(tenant, {"a": (30, "0.2")})
    bad = create(tenant)
    heartbeat_all()
    tick(bad)
    assert NodeUpgrade.objects.filter(rollout=bad, state="in_flight").count() == 6
    return bad


def poster(tenant, name: str, body: dict, answers: list):
    client = client_for(tenant, name)

    def post() -> None:
        response = client.post(URL, body, format="json")
        answers.append((response.status_code, response.json().get("code")))

    return post


def assert_one_writer_per_node() -> None:
    assert not NodeUpgrade.objects.filter(claims_node=True).values("node").annotate(n=Count("id")).filter(n__gt=1)


def test_two_creates_superseding_the_same_rollout_at_once_one_wins(tenant, releases):
    release_stored(manifest("1.0.2", 4, archs=("amd64",)))
    bad = bad_rollout(tenant)
    answers: list = []
    errors = run_together(
        poster(tenant, "alice", {"version": "1.0.1", "supersedes": str(bad.id)}, answers),
        poster(tenant, "bob", {"version": "1.0.2", "supersedes": str(bad.id)}, answers),
    )
    assert errors == []
    assert sorted(answers, key=lambda answer: answer[0]) in (
        [(201, None), (400, "supersede_invalid")],
        [(201, None), (409, "conflict")],
    )
    (winner,) = Rollout.objects.filter(supersedes=bad)
    assert Rollout.objects.get(pk=bad.pk).state == "superseded"
    assert Rollout.objects.count() == 2  # nothing of the loser
    assert RolloutEvent.objects.filter(rollout=bad, kind="rollout.superseded").count() == 1
    assert NodeUpgrade.objects.filter(rollout=winner, state="in_flight").count() == 6
    assert NodeUpgrade.objects.filter(state="in_flight").count() == 6
    assert_one_writer_per_node()


def test_a_supersede_and_a_plain_create_at_once_never_give_a_node_two_writers(tenant, releases):
    bad = bad_rollout(tenant)
    answers: list = []
    errors = run_together(
        poster(tenant, "alice", {"version": "1.0.1", "supersedes": str(bad.id)}, answers),
        poster(tenant, "bob", {"version": "1.0.1"}, answers),
    )
    assert errors == []
    assert sorted(answers, key=lambda answer: answer[0]) == [(201, None), (409, "conflict")]
    assert Rollout.objects.filter(supersedes=bad).count() == 1
    assert_one_writer_per_node()


def test_a_supersede_and_the_old_rollouts_tick_at_once(tenant, releases):
    """The superseded rollout's tick and the supersede meet at its row lock: whichever comes second finds the
    other's work done; no node in flight twice, none sent back."""
    bad = bad_rollout(tenant)
    answers: list = []

    def tick_old() -> None:
        from rollout.controller.tick import rollout_tick

        rollout_tick(rollout_id=bad.id)

    errors = run_together(poster(tenant, "alice", {"version": "1.0.1", "supersedes": str(bad.id)}, answers), tick_old)
    assert errors == []
    assert answers == [(201, None)]
    assert not NodeUpgrade.objects.filter(rollout=bad, state="in_flight").exists()
    assert_one_writer_per_node()
