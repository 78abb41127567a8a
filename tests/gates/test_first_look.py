"""A Prometheus gate is asked once at create and in the dry run (docs/controller.md#gates), against Debian's
real Prometheus: a query it refuses is 400 ``invalid_gate`` with Prometheus' own error and the gate's name,
nothing written; an unreachable Prometheus blocks nothing (the gate is inconclusive, with the error); no
network call happens inside a transaction. Every gate result carries ``detail``: null for a pass, the
provider's error for inconclusive."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.db import connection

from rollout.controller import gate_evaluation
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutGate
from tests.factories import fleet
from tests.gates.conftest import vector
from tests.gates.test_evaluate import create, evaluate, prom
from tests.gates.test_prometheus import exporter, prometheus  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"
BAD = "sum(rate(foo[5m]"


def nothing_written() -> bool:
    return not (
        Rollout.objects.exists()
        or NodeUpgrade.objects.exists()
        or RolloutEvent.objects.exists()
        or RolloutGate.objects.exists()
    )


def _refusal(url: str) -> dict:
    """Prometheus' own 400 answer to a query, asked directly."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=5)  # noqa: S310 - the test's own local Prometheus
    assert refused.value.code == 400
    return json.loads(refused.value.read())


def _gate(query: str, name: str = "error-rate") -> dict:
    return {"name": name, "prometheus": {"query": query, "max": 0.5}}


def test_a_query_prometheus_refuses_is_400_invalid_gate_with_its_error(api, tenant, releases, prometheus):  # noqa: F811
    fleet(tenant, {"a": (2, "0.5")})
    refusal = _refusal(f"{prometheus.url}/api/v1/query?query={urllib.parse.quote(BAD)}")
    assert (refusal["status"], refusal["errorType"]) == ("error", "bad_data")
    for query in ("", "?dryRun=true"):
        response = api.post(URL + query, {"version": "1.0.0", "gates": [prom("ok"), _gate(BAD)]}, format="json")
        assert response.status_code == 400, response.content
        answer = response.json()
        assert (answer["code"], answer["gate"]) == ("invalid_gate", "error-rate")
        assert "error-rate" in answer["detail"]
        assert refusal["error"] in answer["detail"]  # Prometheus' own words
        assert "parse error" in answer["detail"]
    assert nothing_written()


def test_a_query_prometheus_takes_is_created_and_the_dry_run_shows_it(api, tenant, releases, prometheus):  # noqa: F811
    fleet(tenant, {"a": (2, "0.5")})
    gates = [_gate("sum(rate(foo[5m]))"), {"name": "h", "http": {"url": "http://127.0.0.1:9/health"}}]
    plan = api.post(f"{URL}?dryRun=true", {"version": "1.0.0", "gates": gates}, format="json")
    assert plan.status_code == 200, plan.content
    assert plan.json()["gates"] == [
        {**_gate("sum(rate(foo[5m]))"), "onFailure": "pause", "state": "pass", "value": None, "detail": None},
        {
            "name": "h",
            "http": {"url": "http://127.0.0.1:9/health"},
            "onFailure": "pause",
            "state": "pending",
            "value": None,
            "detail": None,
        },
    ]
    assert nothing_written()
    created = api.post(URL, {"version": "1.0.0", "gates": gates}, format="json")
    assert created.status_code == 201, created.content
    # A first pass is no verdict: the evaluation gives the first one, and then its detail is null.
    assert [gate["state"] for gate in api.get(f"{URL}{created.json()['id']}/gates/").json()] == ["pending", "pending"]
    evaluate(Rollout.objects.get())
    first = api.get(f"{URL}{created.json()['id']}/gates/").json()[0]
    assert (first["state"], first["detail"]) == ("pass", None)


def test_an_unreachable_prometheus_blocks_nothing(api, tenant, releases, module_settings, unused_port):
    module_settings.ROLLOUT_PROMETHEUS_URL = f"http://127.0.0.1:{unused_port}"
    fleet(tenant, {"a": (2, "0.5")})
    plan = api.post(f"{URL}?dryRun=true", {"version": "1.0.0", "gates": [_gate(BAD)]}, format="json")
    assert plan.status_code == 200, plan.content
    (gate,) = plan.json()["gates"]
    assert gate["state"] == "inconclusive"
    assert gate["detail"]
    created = api.post(URL, {"version": "1.0.0", "gates": [_gate(BAD)]}, format="json")
    assert created.status_code == 201, created.content
    (shown,) = api.get(f"{URL}{created.json()['id']}/gates/").json()
    assert shown["state"] == "inconclusive"
    assert shown["detail"] == gate["detail"]  # the provider's error, stored with the verdict


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def test_an_inconclusive_result_carries_prometheus_error_text(tenant, releases, module_settings, serve):
    server = serve(
        status=422,
        body=json.dumps({"status": "error", "errorType": "execution", "error": "many-to-many matching"}).encode(),
    )
    module_settings.ROLLOUT_PROMETHEUS_URL = server.url
    fleet(tenant, {"a": (2, "0.5")})
    rollout = create(tenant, prom())
    gate = RolloutGate.objects.get(rollout=rollout)
    assert (gate.state, gate.detail) == (
        "inconclusive",
        "Prometheus answered HTTP 422 (execution): many-to-many matching",
    )
    server.status, server.body = 200, vector("0.1")
    evaluate(rollout)
    gate.refresh_from_db()
    assert (gate.state, gate.detail) == ("pass", "")


@pytest.mark.django_db(transaction=True)
def test_no_network_call_inside_a_transaction(api, tenant, releases, module_settings, serve, monkeypatch):
    server = serve(body=vector("0.1"))
    module_settings.ROLLOUT_PROMETHEUS_URL = server.url
    fleet(tenant, {"a": (2, "0.5")})
    asked_in_transaction: list[bool] = []
    probe = gate_evaluation.prometheus_probe

    def watched(*args, **kwargs):
        asked_in_transaction.append(connection.in_atomic_block)
        return probe(*args, **kwargs)

    monkeypatch.setattr(gate_evaluation, "prometheus_probe", watched)
    for query in ("?dryRun=true", ""):
        response = api.post(URL + query, {"version": "1.0.0", "gates": [prom()]}, format="json")
        assert response.status_code in (200, 201), response.content
    assert asked_in_transaction == [False, False]
