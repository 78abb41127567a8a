"""What each command sends, and what it prints, against a real local HTTP server answering as the API does."""

from __future__ import annotations

import json

import pytest

from tests.ctl.conftest import KEY, rollout

RID = rollout()["id"]
POOLS_PAGE_1 = {
    "results": [{"id": "11111111-1111-1111-1111-111111111111", "name": "gpu-a"}],
    "next": None,  # set per test: the fake's own URL
}
POOLS_PAGE_2 = {"results": [{"id": "22222222-2222-2222-2222-222222222222", "name": "gpu-b"}], "next": None}


def two_pool_pages(api) -> None:
    first = dict(POOLS_PAGE_1, next=f"{api.url}/api/compute/pools/?cursor=c2&limit=1000")
    api.on("GET", "pools/", (200, first), (200, POOLS_PAGE_2))


def test_the_key_is_sent_as_a_bearer_token_and_the_server_may_be_given_as_the_api_root(api, ctl):
    api.on("GET", "rollouts/", (200, {"results": [], "next": None}))
    assert ctl("list", "--server", f"{api.url}/api/compute/")[0] == 0
    assert api.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert api.seen[0].path == "/api/compute/rollouts/"


def test_create_sends_only_the_options_given_and_resolves_pool_names_through_every_page_of_pools(api, ctl):
    two_pool_pages(api)
    api.on("POST", "rollouts/", (201, rollout()))
    status, out, _ = ctl(
        "create",
        "1.4.0",
        "--pools",
        "gpu-b,11111111-1111-1111-1111-111111111111",
        "--waves",
        "1,10,100",
        "--soak",
        "30",
        "--timeout",
        "120",
    )
    assert status == 0
    assert [s.query.get("cursor") for s in api.seen if s.path.endswith("/pools/")] == [None, "c2"]
    (post,) = api.posted()
    assert post.query == {}
    assert post.body == {
        "version": "1.4.0",
        "poolIds": ["22222222-2222-2222-2222-222222222222", "11111111-1111-1111-1111-111111111111"],
        "waves": [1, 10, 100],
        "soakSeconds": 30,
        "upgradeTimeoutSeconds": 120,
    }
    assert RID in out
    assert "active" in out


def test_create_with_a_schedule(api, ctl):
    api.on("POST", "rollouts/", (201, rollout("scheduled", startAt="2030-01-01T00:00:00Z")))
    status, out, _ = ctl(
        "create",
        "1.4.0",
        "--start-at",
        "2030-01-01T00:00:00Z",
        "--end-by",
        "2030-01-02T00:00:00Z",
        "--end-behavior",
        "abort_rollback",
        "--waves",
        "0.5,100",
    )
    assert status == 0
    assert api.posted()[0].body == {
        "version": "1.4.0",
        "waves": [0.5, 100],
        "startAt": "2030-01-01T00:00:00Z",
        "endBy": "2030-01-02T00:00:00Z",
        "endBehavior": "abort_rollback",
    }
    assert "scheduled" in out
    assert "2030-01-01T00:00:00Z" in out


def test_a_pool_name_that_is_no_pool_is_refused_before_anything_is_created(api, ctl):
    two_pool_pages(api)
    status, _, err = ctl("create", "1.4.0", "--pools", "gpu-a,gpu-z")
    assert status == 1
    assert "error: unknown_pool:" in err
    assert "'gpu-z'" in err
    assert api.posted() == []


def test_dry_run_asks_for_the_plan_and_prints_it(api, ctl):
    plan = {
        "version": "1.4.0", "poolIds": ["p1"], "nodes": 20,
        "waves": [{"index": 0, "percent": 10, "total": 2, "pools": {"p1": 2}},
                  {"index": 1, "percent": 100, "total": 18, "pools": {"p1": 18}}],
        "budgets": {"p1": {"allowed": 1, "inUse": 0}}, "maxFailureRatio": 0.1, "soakSeconds": 300,
        "upgradeTimeoutSeconds": 600, "minReadySeconds": 0, "failureRatioMinSettled": 0, "estimatedSeconds": 3725,
    }  # fmt: skip
    api.on("POST", "rollouts/", (200, plan))
    status, out, _ = ctl("create", "1.4.0", "--dry-run")
    assert status == 0
    assert api.posted()[0].query == {"dryRun": "true"}
    assert "20 nodes" in out
    assert "1h 2m 5s" in out
    assert "nothing was created" in out
    assert "left out" not in out
    status, out, _ = ctl("--output", "json", "create", "1.4.0", "--dry-run")
    assert json.loads(out) == plan
    api.on("POST", "rollouts/", (200, plan | {"excluded": {"newer": 3}}))
    assert "3 nodes already on a newer release are left out" in ctl("create", "1.4.0", "--dry-run")[1]


@pytest.mark.parametrize(
    ("argv", "path", "body"),
    [
        (["pause", RID], "pause", None),
        (["resume", RID], "resume", None),
        (["resume", RID, "--end-by", "2030-01-02T00:00:00Z"], "resume", {"endBy": "2030-01-02T00:00:00Z"}),
        (["promote", RID], "promote", None),
        (["start", RID], "start", None),
        (["approve", RID], "approve", None),
        (["approve", RID, "--comment", "looks good"], "approve", {"comment": "looks good"}),
        (["deny", RID, "--comment", "not on a Friday"], "deny", {"comment": "not on a Friday"}),
        (["abort", RID], "abort", {"rollback": False}),
        (["abort", RID, "--rollback"], "abort", {"rollback": True}),
    ],
)
def test_each_action_posts_to_its_endpoint_with_its_body(api, ctl, argv, path, body):
    api.on("POST", f"rollouts/{RID}/{path}/", (200, rollout("paused", pausedReason="manual")))
    status, out, _ = ctl(*argv)
    assert status == 0
    (post,) = api.posted()
    assert (post.path, post.body) == (f"/api/compute/rollouts/{RID}/{path}/", body)
    assert out.strip() == f"{RID} paused  wave 2/2: 5/18 settled, 3 in flight  (manual)"


def test_deny_needs_a_comment_and_a_usage_error_exits_1_not_2(api, ctl):
    status, _, err = ctl("deny", RID)
    assert status == 1
    assert "--comment" in err
    assert api.seen == []


def test_a_label_without_a_value_is_a_usage_error(api, ctl):
    status, _, err = ctl("labels", "", "--set", "tier")
    assert status == 1
    assert "'tier' is not KEY=VALUE" in err
    assert api.seen == []


def test_list_and_nodes_follow_next_until_it_is_null(api, ctl):
    first = {"results": [rollout()], "next": f"{api.url}/api/compute/rollouts/?cursor=x&limit=1&state=active"}
    second = {"results": [rollout(id="00000000-0000-0000-0000-000000000002")], "next": None}
    api.on("GET", "rollouts/", (200, first), (200, second))
    status, out, _ = ctl("--output", "json", "list", "--state", "active", "--page-size", "1")
    assert status == 0
    assert [s.query for s in api.seen] == [
        {"limit": "1", "state": "active"},
        {"cursor": "x", "limit": "1", "state": "active"},
    ]
    assert [r["id"] for r in json.loads(out)["results"]] == [RID, "00000000-0000-0000-0000-000000000002"]
    assert json.loads(out)["next"] is None

    row = {"nodeId": "n1", "poolId": "p", "wave": 0, "position": 0, "state": "pending", "previousVersion": "1.3.0",
           "startedAt": None, "deadline": None, "settledAt": None, "reason": None,
           "blocker": {"code": "budget_full", "detail": "The pool's disruption budget is full."}}  # fmt: skip
    api.on("GET", f"rollouts/{RID}/nodes/", (200, {"results": [row], "next": None}))
    status, out, _ = ctl("nodes", RID, "--state", "pending", "--wave", "0")
    assert status == 0
    assert api.seen[-1].query == {"limit": "100", "state": "pending", "wave": "0"}
    assert "budget is full" in out
    assert "1.3.0" in out


def test_an_api_error_prints_its_code_detail_and_fields_and_exits_1(api, ctl):
    conflict = {"code": "conflict", "detail": "2 nodes are in another rollout.", "nodeIds": ["n1", "n2"]}
    api.on("POST", "rollouts/", (409, conflict))
    status, out, err = ctl("create", "1.4.0")
    assert status == 1
    assert err.splitlines() == ["error: conflict: 2 nodes are in another rollout.", "  nodeIds: n1, n2"]
    assert out == ""
    status, out, _ = ctl("create", "1.4.0", "--output", "json")
    assert (status, json.loads(out)) == (1, conflict)


def test_an_answer_that_is_not_the_api_is_an_error_named_by_its_status(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (502, "<html>Bad Gateway</html>"))
    status, _, err = ctl("status", RID)
    assert status == 1
    assert err.strip() == "error: http_502: <html>Bad Gateway</html>"


def test_status_draws_each_wave_as_a_progress_bar(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout(blocker={"code": "budget_full", "detail": "Budget full."})))
    status, out, _ = ctl("status", RID)
    assert status == 0
    assert "Budget full." in out
    assert "2/2" in out
    assert "5/18" in out
    assert "━" in out


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
