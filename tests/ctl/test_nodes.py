"""``nodes`` (names, ``--wave`` counted from 1, out of range an error) and ``labels`` (no match: exit 5), against a
real local HTTP server answering as the API does."""

from __future__ import annotations

import json

import pytest

from rollout.ctl.nodes import ONE_BY_ONE
from tests.ctl.conftest import rollout

RID = rollout()["id"]
POOL = "a1b2"


def node_row(i: int, wave: int = 0) -> dict:
    return {"nodeId": f"00000000-0000-4000-8000-{i:012d}", "poolId": POOL, "wave": wave, "state": "succeeded",
            "previousVersion": "1.3.0", "reason": None, "blocker": None}  # fmt: skip


def node(i: int) -> dict:
    return {"id": f"00000000-0000-4000-8000-{i:012d}", "name": f"gpu-a-{i:03d}", "poolId": POOL}


def page(rows: list) -> tuple[int, dict]:
    return 200, {"results": rows, "next": None}


def test_nodes_show_names_read_one_by_one_when_few(api, ctl):
    api.on("GET", f"rollouts/{RID}/nodes/", page([node_row(1), node_row(2, wave=1)]))
    for i in (1, 2):
        api.on("GET", f"nodes/{node(i)['id']}/", (200, node(i)))
    code, out, _ = ctl("nodes", RID)
    assert code == 0
    lines = [line.split() for line in out.splitlines()[1:]]
    assert [line[:4] for line in lines] == [
        ["gpu-a-001", node(1)["id"], "1", "succeeded"],
        ["gpu-a-002", node(2)["id"], "2", "succeeded"],  # the API's wave 1: the second
    ]


def test_nodes_of_a_pool_with_many_rows_are_named_from_the_pools_node_list(api, ctl):
    count = ONE_BY_ONE + 5
    api.on("GET", f"rollouts/{RID}/nodes/", page([node_row(i) for i in range(count)]))
    api.on("GET", "nodes/", page([node(i) for i in range(count + 10)]))
    code, out, _ = ctl("nodes", RID)
    assert code == 0
    assert f"gpu-a-{count - 1:03d}" in out
    listed = [s for s in api.seen if s.path == "/api/compute/nodes/"]
    assert [s.query for s in listed] == [{"poolId": POOL, "limit": "1000"}]
    assert not [s for s in api.seen if s.path.startswith("/api/compute/nodes/0")]


def test_nodes_wave_counts_from_1(api, ctl):
    api.on("GET", f"rollouts/{RID}/", (200, rollout()))
    api.on("GET", f"rollouts/{RID}/nodes/", page([]))
    code, _, _ = ctl("nodes", RID, "--wave", "2", "--output", "json")
    assert code == 0
    assert api.seen[-1].query["wave"] == "1"


@pytest.mark.parametrize("wave", ["0", "3", "-1"])
def test_a_wave_out_of_range_is_an_error_not_an_empty_table(api, ctl, wave):
    api.on("GET", f"rollouts/{RID}/", (200, rollout()))  # two waves
    code, out, err = ctl("nodes", RID, "--wave", wave)
    assert code == 1
    assert err.strip() == (
        f"error: invalid_wave: Wave {wave} is out of range: the rollout has 2 waves (--wave counts from 1: 1 to 2)."
    )
    assert out == ""
    assert not [s for s in api.seen if "nodes" in s.path]


def test_labels_that_matched_no_node_exit_5_and_say_so(api, ctl):
    api.on("POST", "nodes/labels/", (200, {"matched": 0}))
    code, out, err = ctl("labels", "zone=eu-9", "--set", "tier=canary")
    assert code == 5
    assert out.strip() == "0 nodes matched"
    assert err.strip() == "error: no node matched the selector 'zone=eu-9': nothing was changed"
    code, out, _ = ctl("labels", "zone=eu-9", "--set", "tier=canary", "--output", "json")
    assert (code, json.loads(out)) == (5, {"matched": 0})


def test_labels_that_matched_exit_0(api, ctl):
    api.on("POST", "nodes/labels/", (200, {"matched": 3}))
    assert ctl("labels", "zone=eu-1", "--set", "tier=canary")[:2] == (0, "3 nodes matched\n")
