"""``status``: nodes counted by state (cancelled never settled), how a rollout ended (who and why), its gates and
its supersede chain, against a real local HTTP server answering as the API does."""

from __future__ import annotations

import json

from tests.ctl.conftest import rollout, wave

RID = rollout()["id"]
OTHER = "0b5e6f1a-2c3d-4e5f-8a9b-0c1d2e3f4a5b"


def denied() -> dict:
    return rollout("denied", waves=[wave(0, 10, total=5, cancelled=5), wave(1, 100, total=36, cancelled=36)])


def events(*rows: tuple[str, dict]) -> tuple[int, dict]:
    return 200, {"results": [{"kind": k, "at": "2026-12-04T17:00:00Z", "data": d} for k, d in rows], "next": None}


def said(out: str) -> list[str]:
    """Every line printed, its spaces squeezed (the columns' widths are rich's)."""
    return [" ".join(line.split()) for line in out.splitlines()]


def row(out: str, first: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split()[:1] == [first])


def test_every_state_is_its_own_column_and_cancelled_nodes_are_not_settled(api, ctl):
    counts = {"succeeded": 3, "failed": 1, "inFlight": 2, "pending": 4, "skipped": 1, "cancelled": 5, "rolledBack": 2}
    api.on("GET", f"rollouts/{RID}/", (200, rollout("aborted", waves=[wave(0, 100, total=18, **counts)])))
    code, out, _ = ctl("status", RID)
    assert code == 0
    header = next(line for line in out.splitlines() if line.split()[:2] == ["wave", "%"])
    assert header.split()[2:] == [
        "progress", "settled", "succeeded", "failed", "in", "flight", "pending", "skipped", "cancelled", "rolled",
        "back",
    ]  # fmt: skip
    assert row(out, "1")[-8:] == ["7/18", "3", "1", "2", "4", "1", "5", "2"]  # settled: 3 + 1 + 1 + 2


def test_a_denied_rollout_says_who_denied_it_and_why_and_never_reads_settled(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, denied()))
    api.on("GET", f"rollouts/{RID}/events/", events(("rollout.denied", {"actor": "api:bob", "comment": "freeze"})))
    code, out, _ = ctl("status", RID)
    assert code == 0
    assert row(out, "denied") == ["denied", "by", "api:bob", "at", "2026-12-04T17:00:00Z"]
    assert row(out, "comment") == ["comment", "freeze"]
    assert row(out, "all")[:2] == ["all", "0/41"]  # not 41/41
    assert "41/41" not in out


def test_an_aborted_rollout_says_who_aborted_it_why_and_what_the_abort_did(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("aborted")))
    aborted = {"actor": "api:alice", "rollback": True, "cancelled": 10, "rolledBack": 3, "notRolledBack": 0}
    api.on("GET", f"rollouts/{RID}/events/", events(("rollout.aborted", aborted)))
    code, out, _ = ctl("status", RID)
    assert code == 0
    assert row(out, "aborted")[:3] == ["aborted", "by", "api:alice"]
    assert "why an operator's abort" in said(out)
    assert "abort did 10 pending cancelled, 3 in flight sent back; succeeded nodes keep the release" in said(out)


def test_the_reason_of_an_abort_is_aborted_reason_when_the_server_gives_it_else_the_events(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("aborted", abortedReason="gate_failed:errors")))
    api.on("GET", f"rollouts/{RID}/events/", events(("rollout.aborted", {"actor": "controller"})))
    assert "why gate_failed:errors" in said(ctl("status", RID)[1])
    api.on("GET", f"rollouts/{RID}/", (200, rollout("aborted", abortedReason=None)))
    api.on(
        "GET",
        f"rollouts/{RID}/events/",
        events(
            ("rollout.deadline", {"endBy": "2026-12-04T18:00:00+00:00", "endBehavior": "abort"}),
            ("rollout.aborted", {"actor": "controller"}),
        ),
    )
    assert "why its endBy (2026-12-04T18:00:00+00:00) passed (endBehavior abort)" in said(ctl("status", RID)[1])


def test_the_gates_latest_results_are_shown(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("active")))
    gate = {
        "name": "errors", "state": "fail", "value": 0.2, "at": "2026-12-04T17:00:00Z", "consecutiveFailures": 2,
        "detail": "1 sample(s), the largest 0.2 > 0.01",
    }  # fmt: skip
    pending = {"name": "canary", "state": "pending", "value": None, "at": None, "consecutiveFailures": 0}
    api.on("GET", f"rollouts/{RID}/gates/", (200, [gate, pending]))
    code, out, _ = ctl("status", RID)
    assert code == 0
    assert "gates" in out
    assert row(out, "errors") == [
        "errors", "fail", "0.2", "2026-12-04T17:00:00Z", "2", "1", "sample(s),", "the", "largest", "0.2", ">", "0.01",
    ]  # fmt: skip
    assert row(out, "canary") == ["canary", "pending", "0"]


def test_the_supersede_chain_is_shown_when_the_representation_carries_it(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("active", supersedes=OTHER, supersededBy=None)))
    assert row(ctl("status", RID)[1], "supersedes") == ["supersedes", OTHER]
    api.on("GET", f"rollouts/{RID}/", (200, rollout("superseded", supersededBy=OTHER)))
    assert row(ctl("status", RID)[1], "superseded") == ["superseded", "by", OTHER]
    api.on("GET", f"rollouts/{RID}/", (200, rollout("active")))  # a server without the fields
    assert "supersed" not in ctl("status", RID)[1]


def test_status_output_json_is_the_apis_own(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, denied()))
    code, out, _ = ctl("status", RID, "--output", "json")
    assert (code, json.loads(out)) == (0, denied())
    assert [s.path for s in api.seen] == [f"/api/compute/rollouts/{RID}/"]


def test_wait_counts_cancelled_nodes_apart_and_waves_from_1(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("denied", currentWave=0, waves=denied()["waves"])))
    code, out, _ = ctl("wait", RID)
    assert code == 3
    assert out.strip() == f"{RID} denied  wave 1/2: 0/5 settled, 5 cancelled"


def test_an_operators_abort_reads_as_such_whatever_the_server_sends(api, ctl):
    """``abortedReason: manual`` (a server with the field) and no field (an older one) say the same words."""
    for reason in ("manual", None):
        api.on("GET", f"rollouts/{RID}/", (200, rollout("aborted", abortedReason=reason)))
        code, out, _ = ctl("status", RID)
        assert code == 0
        assert "why an operator's abort" in said(out)
