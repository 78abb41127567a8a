"""``create``: every option of the API's create, gates in ``--gate``'s syntax or a JSON file, and ``--supersedes``;
what is sent, against a real local HTTP server answering as the API does."""

from __future__ import annotations

import json

import pytest

from tests.ctl.conftest import rollout

OTHER = "0b5e6f1a-2c3d-4e5f-8a9b-0c1d2e3f4a5b"


def sent(api) -> dict:
    posts = [s for s in api.seen if s.method == "POST"]
    assert len(posts) == 1
    return posts[0].body


def test_every_option_is_sent_under_the_apis_name(api, ctl):
    api.on("POST", "rollouts/", (201, rollout()))
    code, _, err = ctl(
        "create", "1.4.0", "--selector", "ring=canary", "--waves", "1,10,100", "--soak", "60", "--timeout", "300",
        "--max-failure-ratio", "0.2", "--start-at", "2026-12-09T08:00:00Z", "--end-by", "2026-12-09T18:00:00Z",
        "--end-behavior", "abort", "--min-ready", "30", "--failure-ratio-min-settled", "5",
        "--gate", "errors:prometheus=sum(rate(http_5xx[5m])) / sum(rate(http[5m]))<=0.01",
        "--gate", "canary:http=https://status.example.net/ok:abort_rollback",
        "--gate-interval", "15", "--gate-failure-limit", "4", "--supersedes", OTHER,
    )  # fmt: skip
    assert code == 0, err
    assert sent(api) == {
        "version": "1.4.0",
        "selector": "ring=canary",
        "waves": [1, 10, 100],
        "soakSeconds": 60,
        "upgradeTimeoutSeconds": 300,
        "maxFailureRatio": 0.2,
        "startAt": "2026-12-09T08:00:00Z",
        "endBy": "2026-12-09T18:00:00Z",
        "endBehavior": "abort",
        "minReadySeconds": 30,
        "failureRatioMinSettled": 5,
        "gateIntervalSeconds": 15,
        "gateFailureLimit": 4,
        "supersedes": OTHER,
        "gates": [
            {"name": "errors", "prometheus": {"query": "sum(rate(http_5xx[5m])) / sum(rate(http[5m]))", "max": 0.01}},
            {"name": "canary", "http": {"url": "https://status.example.net/ok"}, "onFailure": "abort_rollback"},
        ],
    }


def test_a_gate_whose_query_holds_le_takes_the_last_one_as_its_maximum(api, ctl):
    api.on("POST", "rollouts/", (201, rollout()))
    assert ctl("create", "1.4.0", "--gate", "q:prometheus=up <= 0 or vector(1)<=1:abort")[0] == 0
    assert sent(api)["gates"] == [
        {"name": "q", "prometheus": {"query": "up <= 0 or vector(1)", "max": 1}, "onFailure": "abort"}
    ]


def test_gates_from_a_file_come_first_as_given(api, ctl, tmp_path):
    path = tmp_path / "gates.json"
    gates = [{"name": "errors", "prometheus": {"query": "x", "max": 0}, "onFailure": "pause"}]
    path.write_text(json.dumps(gates))
    api.on("POST", "rollouts/", (201, rollout()))
    assert ctl("create", "1.4.0", "--gates", str(path), "--gate", "h:http=https://x.example/")[0] == 0
    assert sent(api)["gates"] == [*gates, {"name": "h", "http": {"url": "https://x.example/"}}]


def test_a_dry_run_sends_the_gates_too(api, ctl):
    api.on("POST", "rollouts/", (200, {"version": "1.4.0", "nodes": 3, "waves": [], "poolIds": [], "budgets": {}}))
    assert ctl("create", "1.4.0", "--dry-run", "--gate", "e:prometheus=x<=1", "--supersedes", OTHER)[0] == 0
    assert api.seen[-1].query == {"dryRun": "true"}
    assert sent(api)["gates"] == [{"name": "e", "prometheus": {"query": "x", "max": 1}}]
    assert sent(api)["supersedes"] == OTHER


@pytest.mark.parametrize(
    ("gate", "says"),
    [
        ("errors", "is not NAME:prometheus=QUERY<=MAX or NAME:http=URL"),
        ("errors:statsd=x<=1", "is not NAME:prometheus"),
        (":http=https://x", "is not NAME:prometheus"),
        ("errors:prometheus=up", "a Prometheus gate is NAME:prometheus=QUERY<=MAX"),
        ("errors:prometheus=up<=lots", "a Prometheus gate is NAME:prometheus=QUERY<=MAX"),
        ("errors:prometheus=<=1", "a Prometheus gate is NAME:prometheus=QUERY<=MAX"),
    ],
)
def test_a_gate_not_in_the_syntax_is_a_usage_error_and_nothing_is_sent(api, ctl, gate, says):
    code, _, err = ctl("create", "1.4.0", "--gate", gate)
    assert code == 1
    assert says in err
    assert api.seen == []


@pytest.mark.parametrize(
    ("text", "says"), [("{", "is not JSON"), ('{"name": "x"}', "is not a JSON list of gate objects")]
)
def test_a_gates_file_that_is_not_a_list_of_gates_is_a_usage_error(api, ctl, tmp_path, text, says):
    path = tmp_path / "gates.json"
    path.write_text(text)
    code, _, err = ctl("create", "1.4.0", "--gates", str(path))
    assert (code, says in err, api.seen) == (1, True, [])
    code, _, err = ctl("create", "1.4.0", "--gates", str(tmp_path / "missing.json"))
    assert (code, "cannot read" in err, api.seen) == (1, True, [])


def test_the_apis_refusal_of_a_gate_is_printed_with_its_code(api, ctl):
    refusal = {"code": "invalid_gate", "detail": "Prometheus refused the query: parse error", "gate": "errors"}
    api.on("POST", "rollouts/", (400, refusal))
    code, _, err = ctl("create", "1.4.0", "--gate", "errors:prometheus=sum(rate(foo[5m]<=1")
    assert code == 1
    assert err.splitlines() == ["error: invalid_gate: Prometheus refused the query: parse error", '  gate: "errors"']


def test_a_dry_run_shows_the_schedule_and_the_gates_when_the_plan_carries_them(api, ctl):
    plan = {
        "version": "1.4.0", "nodes": 3, "waves": [{"index": 0, "percent": 100, "total": 3, "pools": {}}],
        "poolIds": [], "budgets": {}, "startAt": "2026-12-09T08:00:00Z", "endBy": "2026-12-09T18:00:00Z",
        "endBehavior": "abort", "supersedes": OTHER,
        "gates": [{"name": "errors", "state": "pass", "value": 0, "detail": "1 sample(s), the largest 0 <= 0.01"}],
    }  # fmt: skip
    api.on("POST", "rollouts/", (200, plan))
    code, out, _ = ctl("create", "1.4.0", "--dry-run")
    assert code == 0
    for line in ("starts at: 2026-12-09T08:00:00Z", "ends by: 2026-12-09T18:00:00Z", "at its end: abort"):
        assert line in out
    assert f"supersedes {OTHER}" in out
    assert next(x.split() for x in out.splitlines() if x.startswith("errors"))[:5] == [
        "errors",
        "pass",
        "0",
        "1",
        "sample(s),",
    ]
