"""Arguments that never reach a server, and answers the live server cannot be made to give (a proxy's HTML),
against a real local HTTP server answering as the API does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rollout.ctl.client import retry_after
from tests.ctl.conftest import KEY, rollout

RID = rollout()["id"]


def test_a_usage_error_exits_1_not_2(api, ctl):
    status, _, err = ctl("wait")
    assert status == 1
    assert "id" in err
    assert api.seen == []


def test_deny_without_a_comment_is_the_servers_to_refuse_and_its_code_is_printed(api, ctl):
    """16.3 lists ``deny ID [--comment C]``: the API decides (400 invalid_input), the command prints its code."""
    path = f"rollouts/{RID}/deny/"
    api.on("POST", path, (400, {"code": "invalid_input", "detail": "comment: This field is required."}))
    status, _, err = ctl("deny", RID)
    assert status == 1
    assert "invalid_input" in err


def test_a_label_without_a_value_is_a_usage_error(api, ctl):
    status, _, err = ctl("labels", "", "--set", "tier")
    assert status == 1
    assert "'tier' is not KEY=VALUE" in err
    assert api.seen == []


def test_an_answer_that_is_not_the_api_is_an_error_named_by_its_status(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (502, "<html>Bad Gateway</html>"))
    status, _, err = ctl("status", RID)
    assert status == 1
    assert err.strip() == "error: http_502: <html>Bad Gateway</html>"


def test_the_key_comes_only_from_the_environment(api, ctl, monkeypatch):
    monkeypatch.delenv("ROLLOUT_API_KEY")
    status, _, err = ctl("list")
    assert status == 1
    assert (
        err.strip() == "error: no_api_key: Set ROLLOUT_API_KEY to an API key (it is never taken on the command line)."
    )
    status, _, err = ctl("list", "--api-key", KEY)
    assert status == 1
    assert "unrecognized arguments: --api-key" in err
    assert api.seen == []


def test_the_server_comes_from_the_option_or_the_environment(api, ctl, monkeypatch):
    monkeypatch.delenv("ROLLOUT_SERVER")
    status, _, err = ctl("list")
    assert (status, err.strip()) == (
        1,
        "error: no_server: Say which server: --server http://host:port, or set ROLLOUT_SERVER.",
    )
    api.on("GET", "rollouts/", (200, {"results": [], "next": None}))
    assert ctl("--server", api.url, "list")[0] == 0
    status, _, err = ctl("list", "--server", "127.0.0.1:1")
    assert (status, err.strip()) == (1, "error: invalid_server: '127.0.0.1:1' is not an http:// or https:// URL.")


def test_a_server_that_does_not_answer_is_an_error(ctl):
    status, _, err = ctl("list", "--server", "http://127.0.0.1:9")
    assert status == 1
    assert err.startswith("error: unreachable: http://127.0.0.1:9/api/compute/")


@pytest.mark.parametrize("action", ["pause", "resume", "promote", "start", "approve", "deny"])
def test_every_action_but_abort_sends_a_comment(api, ctl, action):
    api.on("POST", f"rollouts/{RID}/{action}/", (200, rollout()))
    code, _, _ = ctl(action, RID, "--comment", "change 42")
    assert code == 0
    assert api.seen[-1].body == {"comment": "change 42"}


def test_retry_after_is_read_as_seconds_or_an_http_date():
    now = datetime(2026, 12, 8, 1, 0, 0, tzinfo=UTC)
    assert retry_after("5") == 5.0
    assert retry_after("Tue, 08 Dec 2026 01:00:30 GMT", now=now) == 30.0
    assert retry_after("Tue, 08 Dec 2026 00:59:00 GMT", now=now) == 0.0  # already past: at once
    assert [retry_after(x) for x in (None, "", "soon", "-3")] == [None] * 4
