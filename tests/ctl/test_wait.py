"""``wait``'s exit codes and ``status --watch``, against a real local HTTP server whose answers change."""

from __future__ import annotations

import json

import pytest

from rollout.ctl.follow import TRANSIENT_TRIES
from tests.ctl.conftest import rollout

RID = rollout()["id"]
FAST = ("--interval", "0.01")


def test_wait_asks_again_after_a_transient_answer(api, ctl):
    busy = (503, {"code": "database_unavailable", "detail": "The database is unavailable."})
    api.on(
        "GET",
        f"rollouts/{RID}/",
        busy,
        (429, {"code": "throttled", "detail": "Slow down."}),
        (200, rollout("completed")),
    )
    code, _, err = ctl("wait", RID, *FAST)
    assert code == 0
    assert "warning: database_unavailable" in err
    assert "warning: throttled" in err


def test_wait_gives_up_after_transient_answers_in_a_row_with_exit_1(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (503, {"code": "database_unavailable", "detail": "The database is unavailable."}))
    code, _, err = ctl("wait", RID, *FAST)
    assert code == 1
    assert len(api.seen) == TRANSIENT_TRIES
    assert err.splitlines()[-1] == "error: database_unavailable: The database is unavailable."


def test_status_watch_redraws_until_the_rollout_finishes_and_a_pause_does_not_end_it(api, ctl):
    api.on("GET", f"rollouts/{RID}/", *[(200, rollout(s)) for s in ("active", "paused", "active", "completed")])
    api.on("GET", "pools/", (200, {"results": [{"id": "a1b2", "name": "gpu-a"}], "next": None}))
    code, out, _ = ctl("status", RID, "--watch", *FAST)
    assert code == 0
    assert [s.path for s in api.seen].count(f"/api/compute/rollouts/{RID}/") == 4
    assert "completed" in out
    assert "gpu-a" in out  # the pool's name, read once
    code, out, _ = ctl("status", RID, "--watch", "--output", "json", *FAST)
    assert json.loads(out)["state"] == "completed"


@pytest.mark.parametrize("bad", ["-1", "nan", "soon"])
def test_a_timeout_that_is_no_number_of_seconds_is_a_usage_error(api, ctl, bad):
    code, _, err = ctl("wait", RID, "--timeout", bad)
    assert code == 1
    assert "is not a number of seconds" in err
    assert api.seen == []


def test_a_timeout_while_the_server_does_not_answer_is_an_error_not_a_timeout(api, ctl):
    """``--timeout`` passes while the reads fail: the error is the outcome (1), not "still running" (4)."""
    busy = (503, {"code": "database_unavailable", "detail": "The database is unavailable."})
    api.on("GET", f"rollouts/{RID}/", busy)
    code, _, err = ctl("wait", RID, "--timeout", "0.05", "--interval", "0.02")
    assert code == 1
    assert len(api.seen) < TRANSIENT_TRIES  # the timeout came first
    assert err.splitlines()[-1] == "error: database_unavailable: The database is unavailable."


def test_a_timeout_after_a_good_read_is_still_4(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout("active")))
    code, _, err = ctl("wait", RID, "--timeout", "0.05", "--interval", "0.02")
    assert code == 4
    assert "timed out after 0.05 s: the rollout is still active" in err
