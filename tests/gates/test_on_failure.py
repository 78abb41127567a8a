"""Gates that act (docs/controller.md#gates): ``onFailure`` pause, abort or abort_rollback at ``gateFailureLimit``."""

from __future__ import annotations

import pytest

from fleet.models import Node
from rollout.models import Rollout, RolloutEvent, RolloutGate
from rollout.rollouts.actions import rollout_abort
from tests.factories import fleet
from tests.gates.conftest import vector
from tests.gates.test_evaluate import create, evaluate, prometheus  # noqa: F401  (the stub's fixture)
from tests.rollout.helpers import states, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def gate(on_failure: str | None) -> dict:
    acts = {} if on_failure is None else {"onFailure": on_failure}
    return {"name": "errors", "prometheus": {"query": "errors", "max": 1}, **acts}


def failing(tenant, prometheus, on_failure: str | None) -> Rollout:  # noqa: F811
    """Two nodes (one at a time): the gate passes, the first node starts, then the gate fails twice (the limit)."""
    fleet(tenant, {"a": (2, "0.5")})
    rollout = create(tenant, gate(on_failure), limit=2)
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"in_flight": 1, "pending": 1}
    prometheus.body = vector("9")
    evaluate(rollout)
    evaluate(rollout)
    tick(rollout)
    return rollout


def test_on_failure_abort_aborts_and_names_the_gate(api, tenant, releases, prometheus):  # noqa: F811
    rollout = failing(tenant, prometheus, "abort")
    assert (rollout.state, rollout.aborted_reason) == ("aborted", "gate_failed:errors")
    # Without rollback the node in flight goes on; the pending one is cancelled.
    assert states(rollout) == {"in_flight": 1, "cancelled": 1}
    shown = api.get(f"{URL}{rollout.id}/").json()
    assert (shown["state"], shown["abortedReason"], shown["pausedReason"]) == ("aborted", "gate_failed:errors", None)
    last = RolloutEvent.objects.filter(rollout=rollout, kind="rollout.gate_failed").last()
    assert (last.data["gate"], last.data["action"]) == ("errors", "abort")
    aborted = RolloutEvent.objects.get(rollout=rollout, kind="rollout.aborted").data
    assert (aborted["actor"], aborted["reason"], aborted["rollback"]) == ("gate:errors", "gate_failed:errors", False)
    assert api.get(f"{URL}{rollout.id}/gates/").json()[0]["onFailure"] == "abort"


def test_on_failure_abort_rollback_sends_the_nodes_in_flight_back(tenant, releases, prometheus):  # noqa: F811
    rollout = failing(tenant, prometheus, "abort_rollback")
    assert (rollout.state, rollout.aborted_reason) == ("aborted", "gate_failed:errors")
    assert states(rollout) == {"rolled_back": 1, "cancelled": 1}
    (back,) = rollout.node_upgrades.filter(state="rolled_back")
    assert Node.objects.get(pk=back.node_id).spec["daemon"]["version"] == "0.9.0"
    assert RolloutEvent.objects.filter(kind="rollout.gate_failed").last().data["action"] == "abort_rollback"


def test_on_failure_pause_is_the_default(tenant, releases, prometheus):  # noqa: F811
    rollout = failing(tenant, prometheus, None)
    assert (rollout.state, rollout.paused_reason, rollout.aborted_reason) == ("paused", "gate_failed:errors", None)
    assert RolloutGate.objects.get().on_failure == "pause"


def test_a_manual_abort_says_manual_and_others_say_null(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    created = api.post(URL, {"version": "1.0.0"}, format="json").json()
    assert created["abortedReason"] is None
    rollout_abort(rollout_id=created["id"])
    assert api.get(f"{URL}{created['id']}/").json()["abortedReason"] == "manual"


@pytest.mark.parametrize("on_failure", ["stop", "", 1, None, "Abort"])
def test_an_unknown_on_failure_is_refused_and_nothing_written(api, tenant, releases, prometheus, on_failure):  # noqa: F811
    fleet(tenant, {"a": (2, "1")})
    body = {"version": "1.0.0", "gates": [{**gate(None), "onFailure": on_failure}]}
    response = api.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_gate"
    assert not Rollout.objects.exists()
