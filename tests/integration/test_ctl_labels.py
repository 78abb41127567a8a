"""``python -m rollout.ctl labels`` and ``create --selector`` end to end against the live server (and, for the
rollout, a Celery worker and beat and simulated agents)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from fleet.models import Permission
from fleet.services.iam import api_key_create
from simulator import Fleet, build_agent_configs
from tests.factories import pin
from tests.integration.test_ctl_end_to_end import ctl, key_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_labels_sets_and_removes_on_the_matching_nodes_of_the_named_pools(live_server, tenant):
    _, key = api_key_create(tenant=tenant, username="ops", grants=[Permission.FLEET_ADMIN])
    api = httpx.Client(base_url=f"{live_server.url}/api/compute", headers={"Authorization": f"Bearer {key}"})
    for pool, count in (("gpu-a", 3), ("gpu-b", 2)):
        pool_id = api.post("/pools/", json={"name": pool}).json()["id"]
        for i in range(count):
            created = api.post("/nodes/", json={"name": f"{pool}-{i}", "poolId": pool_id, "arch": "amd64"})
            assert created.status_code == 201, created.text

    def labels_of(selector: str) -> dict[str, dict[str, str]]:
        page = api.get("/nodes/", params={"selector": selector}).json()
        return {node["name"]: node["labels"] for node in page["results"]}

    zoned = ctl(live_server.url, key, "labels", "", "--set", "zone=eu-1,tier=", "--pools", "gpu-a")
    assert (zoned.returncode, zoned.stdout.strip()) == (0, "3 nodes matched")
    assert labels_of("zone=eu-1") == {f"gpu-a-{i}": {"zone": "eu-1", "tier": ""} for i in range(3)}

    canary = ctl(live_server.url, key, "labels", "!zone", "--set", "canary=yes", "--set", "old=1,older=2")
    assert (canary.returncode, canary.stdout.strip()) == (0, "2 nodes matched")
    removed = ctl(live_server.url, key, "--output", "json", "labels", "zone in (eu-1,eu-2)", "--remove", "tier")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == '{\n  "matched": 3\n}'
    older = ctl(live_server.url, key, "labels", "canary", "--remove", "old", "--remove", "older,absent")
    assert older.stdout.strip() == "2 nodes matched"
    assert labels_of("") == {
        **{f"gpu-a-{i}": {"zone": "eu-1"} for i in range(3)},
        **{f"gpu-b-{i}": {"canary": "yes"} for i in range(2)},
    }

    bad = ctl(live_server.url, key, "labels", "zone in (eu-1", "--set", "x=y")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: invalid_selector: ")
    invalid = ctl(live_server.url, key, "labels", "", "--set", "bad key=x")
    assert invalid.returncode == 1
    assert invalid.stderr.startswith("error: invalid_labels: ")
    assert labels_of("x") == {}


def test_a_rollout_to_a_selection_upgrades_only_the_matching_nodes(stack):
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    enrolled = stack.enroll({"p": (4, 0.5)})
    key = key_of(stack)
    marked = ctl(stack.url, key, "labels", "", "--set", "ring=0", "--pools", "p")
    assert marked.stdout.strip() == "4 nodes matched"
    node_id = stack.client.get("/api/compute/nodes/").json()["results"][0]["id"]
    held = stack.client.patch(f"/api/compute/nodes/{node_id}/", json={"labels": {"ring": "1"}})
    assert held.status_code == 200, held.text
    agents = build_agent_configs(enrolled["p"], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=7)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 4, timeout=30)
        plan = ctl(stack.url, key, "create", "1.0.0", "--selector", "ring=0", "--dry-run")
        assert "dry run: 3 nodes to bcd 1.0.0" in plan.stdout, plan.stderr
        created = ctl(
            stack.url, key, "--output", "json", "create", "1.0.0", "--selector", "ring=0", "--waves", "50,100",
            "--soak", "0", "--timeout", "30",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        rollout = json.loads(created.stdout)
        assert (rollout["selector"], sum(w["total"] for w in rollout["waves"])) == ("ring=0", 3)
        shown = ctl(stack.url, key, "status", rollout["id"])
        assert re.search(r"^selector +ring=0 *$", shown.stdout, re.MULTILINE), shown.stdout
        done = ctl(stack.url, key, "wait", rollout["id"], "--interval", "0.2", "--timeout", "90")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert running.wait_for(lambda f: f.versions() == {"1.0.0": 3, "0.9.0": 1}, timeout=30)
    upgraded = ctl(stack.url, key, "nodes", rollout["id"], "--output", "json")
    assert node_id not in {row["nodeId"] for row in json.loads(upgraded.stdout)["results"]}
    bad = ctl(stack.url, key, "create", "1.0.0", "--selector", "ring in (0")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: invalid_selector: ")
