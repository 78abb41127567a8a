"""``wait`` and ``status --watch``: their exit codes, and how they ride out a server that says "later", against a
real local HTTP server whose answers change. The same across a real PostgreSQL restart:
tests/ctl/test_database_restart.py."""

from __future__ import annotations

import json
import time

import pytest

from tests.ctl.conftest import rollout

RID = rollout()["id"]
PATH = f"rollouts/{RID}/"
FAST = ("--interval", "0.01")
BUSY = (503, {"code": "database_unavailable", "detail": "The database is unavailable."})


def reads(api) -> list:
    return [s for s in api.seen if s.path == f"/api/compute/{PATH}"]


def test_wait_asks_again_after_transient_answers_warning_once_per_code(api, ctl):
    api.on("GET", PATH, BUSY, BUSY, (429, {"code": "throttled", "detail": "Slow down."}), (200, rollout("completed")))
    code, _, err = ctl("wait", RID, *FAST)
    assert code == 0
    assert err.count("warning: database_unavailable") == 1
    assert err.count("warning: throttled") == 1
    assert "the server answers again" in err


def test_wait_has_no_fixed_retry_count(api, ctl):
    """Twenty 503s in a row (the old limit was 5): still waiting, and the rollout's outcome decides."""
    api.on("GET", PATH, *[BUSY] * 20, (200, rollout("completed")))
    code, _, _ = ctl("wait", RID, *FAST, "--timeout", "600")
    assert code == 0
    assert len(reads(api)) == 21


def test_wait_honours_retry_after(api, ctl):
    api.on("GET", PATH, (*BUSY, {"Retry-After": "1"}), (200, rollout("completed")))
    code, _, err = ctl("wait", RID, *FAST)
    assert code == 0
    first, second = reads(api)
    assert second.at - first.at >= 1.0  # not the 0.01 s interval
    assert "(Retry-After: 1 s)" in err


def test_retry_after_never_outlasts_the_timeout(api, ctl):
    api.on("GET", PATH, (*BUSY, {"Retry-After": "3600"}))
    started = time.monotonic()
    code, _, err = ctl("wait", RID, "--timeout", "0.3", *FAST)
    assert time.monotonic() - started < 5
    assert code == 4
    assert err.splitlines()[-1] == "timed out after 0.3 s: the rollout is still unread"


def test_a_server_that_does_not_answer_is_asked_again_until_the_timeout_then_it_is_a_timeout(ctl):
    started = time.monotonic()
    code, _, err = ctl("wait", RID, "--server", "http://127.0.0.1:9", "--timeout", "0.5", "--interval", "0.05")
    assert time.monotonic() - started >= 0.5
    assert code == 4
    assert err.count("warning: unreachable") == 1
    assert err.splitlines()[-1] == "timed out after 0.5 s: the rollout is still unread"


def test_a_refusal_that_is_not_transient_ends_wait_at_once(api, ctl):
    api.on("GET", PATH, (404, {"code": "not_found", "detail": "No such rollout."}))
    code, _, err = ctl("wait", RID, *FAST, "--timeout", "600")
    assert code == 1
    assert len(reads(api)) == 1
    assert err.strip() == "error: not_found: No such rollout."


@pytest.mark.parametrize(
    ("state", "code"), [("completed", 0), ("paused", 2), ("aborted", 3), ("denied", 3), ("superseded", 3)]
)
def test_wait_exit_codes(api, ctl, state, code):
    api.on("GET", PATH, (200, rollout("active")), (200, rollout(state)))
    assert ctl("wait", RID, *FAST)[0] == code


def test_wait_keeps_waiting_through_states_that_are_no_outcome(api, ctl):
    states = ("scheduled", "awaiting_approval", "active", "completed")
    api.on("GET", PATH, *[(200, rollout(s)) for s in states])
    code, out, _ = ctl("wait", RID, *FAST)
    assert code == 0
    assert len(reads(api)) == 4
    assert "wave 2/2" in out  # counted from 1 (currentWave 1)


@pytest.mark.parametrize("bad", ["-1", "nan", "soon"])
def test_a_timeout_that_is_no_number_of_seconds_is_a_usage_error(api, ctl, bad):
    code, _, err = ctl("wait", RID, "--timeout", bad)
    assert code == 1
    assert "is not a number of seconds" in err
    assert api.seen == []


def test_a_timeout_after_a_good_read_is_still_4(api, ctl):
    api.on("GET", PATH, (200, rollout("active")))
    code, _, err = ctl("wait", RID, "--timeout", "0.05", "--interval", "0.02")
    assert code == 4
    assert "timed out after 0.05 s: the rollout is still active" in err


def test_status_watch_redraws_until_the_rollout_completes_and_exits_0(api, ctl):
    api.on("GET", PATH, *[(200, rollout(s)) for s in ("scheduled", "active", "active", "completed")])
    api.on("GET", "pools/", (200, {"results": [{"id": "a1b2", "name": "gpu-a"}], "next": None}))
    code, out, _ = ctl("status", RID, "--watch", *FAST)
    assert code == 0
    assert len(reads(api)) == 4
    assert "completed" in out
    assert "gpu-a" in out  # the pool's name, read once
    code, out, _ = ctl("status", RID, "--watch", "--output", "json", *FAST)
    assert json.loads(out)["state"] == "completed"


@pytest.mark.parametrize(("state", "code"), [("aborted", 3), ("denied", 3), ("superseded", 3)])
def test_status_watch_exits_with_waits_codes(api, ctl, state, code):
    api.on("GET", PATH, (200, rollout("active")), (200, rollout(state)))
    assert ctl("status", RID, "--watch", *FAST)[0] == code
    assert ctl("status", RID, "--watch", "--output", "json", *FAST)[0] == code


def test_status_watch_exits_2_on_a_pause_as_wait_does_and_4_at_its_timeout(api, ctl):
    api.on("GET", PATH, (200, rollout("active")), (200, rollout("paused")))
    assert ctl("status", RID, "--watch", *FAST)[0] == 2
    api.on("GET", PATH, (200, rollout("active")))
    code, _, err = ctl("status", RID, "--watch", "--timeout", "0.05", *FAST)
    assert (code, "timed out after 0.05 s: the rollout is still active" in err) == (4, True)


def test_an_outage_that_outlasts_the_timeout_is_a_timeout(api, ctl):
    """The rollout was not seen to finish in time: 4, for wait and status --watch alike (not 1, an error)."""
    api.on("GET", PATH, *[BUSY] * 50)
    assert ctl("wait", RID, "--timeout", "0.2", *FAST)[0] == 4
    assert ctl("status", RID, "--watch", "--timeout", "0.2", *FAST)[0] == 4


def test_status_watch_rides_out_503s_and_honours_retry_after(api, ctl):
    api.on(
        "GET", PATH, (200, rollout("active")), *[BUSY] * 8, (*BUSY, {"Retry-After": "1"}), (200, rollout("completed"))
    )
    code, _, err = ctl("status", RID, "--watch", *FAST, "--timeout", "600")
    assert code == 0
    seen = reads(api)
    assert len(seen) == 11
    assert seen[-1].at - seen[-2].at >= 1.0
    assert err.count("warning: database_unavailable") == 1


def test_status_watch_that_starts_in_an_outage_rides_it_out(api, ctl):
    """The pools' names are read at the first drawing the server answers, not before the watch begins."""
    api.on("GET", "pools/", BUSY, (200, {"results": [{"id": "a1b2", "name": "gpu-a"}], "next": None}))
    api.on("GET", PATH, BUSY, BUSY, (200, rollout("completed")))
    code, out, _ = ctl("status", RID, "--watch", *FAST, "--timeout", "60")
    assert code == 0
    assert "completed" in out
