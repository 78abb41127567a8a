"""``python -m rollout.ctl`` end to end: the command line as a pipeline runs it (a subprocess, the key in its
environment), against the live server, a Celery worker and beat, and simulated bcd agents."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from demo.processes import wait_until
from fleet.models import Permission
from fleet.services.iam import api_key_create
from rollout.models import Rollout
from simulator import Fleet, build_agent_configs
from tests.factories import pin, rollout_settings

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
REPOSITORY = Path(__file__).resolve().parents[2]


def ctl(server: str, key: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLOUT_SERVER": server, "ROLLOUT_API_KEY": key, "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "rollout.ctl", *argv],
        env=env,
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def key_of(stack) -> str:
    return stack.client.headers["Authorization"].removeprefix("Bearer ")


def test_create_by_pool_names_wait_times_out_promote_watch_to_completion_then_wait_exits_0(stack):
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    enrolled = stack.enroll({"gpu-a": (3, 0.5), "gpu-b": (3, 0.5)})
    pools = {p["name"]: p["id"] for p in stack.client.get("/api/compute/pools/").json()["results"]}
    key = key_of(stack)
    agents = build_agent_configs([a for pool in enrolled.values() for a in pool], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=4)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 6, timeout=30)
        plan = ctl(stack.url, key, "create", "1.0.0", "--pools", "gpu-a,gpu-b", "--waves", "50,100", "--dry-run")
        assert plan.returncode == 0, plan.stderr
        assert "dry run: 6 nodes to bcd 1.0.0" in plan.stdout
        assert not Rollout.objects.exists()

        created = ctl(
            stack.url, key, "--output", "json", "create", "1.0.0", "--pools", f"gpu-a,{pools['gpu-b']}",
            "--waves", "50,100", "--soak", "3600", "--timeout", "30",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        rollout = json.loads(created.stdout)
        assert sorted(rollout["poolIds"]) == sorted(pools.values())
        assert (rollout["waves"][0]["total"], rollout["soakSeconds"]) == (3, 3600)
        rid = rollout["id"]

        # Wave 0 cannot settle and soak an hour within a second: 4.
        timed_out = ctl(stack.url, key, "wait", rid, "--timeout", "1", "--interval", "0.2")
        assert timed_out.returncode == 4, timed_out.stderr
        assert "timed out after 1 s: the rollout is still active" in timed_out.stderr

        wait_until(lambda: Rollout.objects.get(pk=rid).next_wave_at is not None, timeout=60, what="wave 0 to soak")
        promoted = ctl(stack.url, key, "promote", rid)
        assert promoted.returncode == 0, promoted.stderr
        assert promoted.stdout.startswith(f"{rid} active  wave 1/2: 3/3 settled")

        watched = ctl(stack.url, key, "status", rid, "--watch", "--interval", "0.2")
        assert watched.returncode == 0, watched.stderr
        assert "completed" in watched.stdout
        assert "3/3" in watched.stdout
        assert "━" in watched.stdout  # the waves' progress bars

    done = ctl(stack.url, key, "wait", rid)
    assert (done.returncode, done.stdout.strip()) == (0, f"{rid} completed  wave 2/2: 3/3 settled")
    nodes = ctl(stack.url, key, "nodes", rid, "--state", "succeeded", "--output", "json", "--page-size", "4")
    assert nodes.returncode == 0, nodes.stderr
    assert len(json.loads(nodes.stdout)["results"]) == 6  # two pages, followed
    listed = ctl(stack.url, key, "list", "--state", "completed")
    assert rid in listed.stdout
    assert "6/6" in listed.stdout


def test_wait_exits_2_on_a_failing_canary_then_3_once_aborted_and_a_refused_action_prints_the_api_code(stack):
    stack.register("1.0.0", 2)
    stack.register("1.1.0", 3)
    enrolled = stack.enroll({"p": (10, 0.2)})
    key = key_of(stack)
    # Every agent fails on 1.1.0: it leaves to restart and never comes back.
    agents = build_agent_configs(enrolled["p"], daemon_version="1.0.0", fail_version="1.1.0", fail_mode="never_rejoin")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=5)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 10, timeout=30)
        created = ctl(stack.url, key, "--output", "json", "create", "1.1.0", "--waves", "10,100",
                      "--soak", "0", "--timeout", "5")  # fmt: skip
        assert created.returncode == 0, created.stderr
        rid = json.loads(created.stdout)["id"]
        paused = ctl(stack.url, key, "wait", rid, "--interval", "0.2", "--timeout", "90")
        assert paused.returncode == 2, (paused.stdout, paused.stderr)
        assert paused.stdout.splitlines()[-1] == f"{rid} paused  wave 1/2: 1/1 settled, 1 failed  (failure_ratio)"
        # status --watch ends as wait does: paused is 2.
        watched = ctl(stack.url, key, "status", rid, "--watch", "--interval", "0.2", "--timeout", "30")
        assert watched.returncode == 2, (watched.stdout, watched.stderr)

        aborted = ctl(stack.url, key, "abort", rid, "--rollback")
        assert aborted.returncode == 0, aborted.stderr
        assert aborted.stdout.startswith(f"{rid} aborted")
        stopped = ctl(stack.url, key, "wait", rid, "--output", "json")
        assert stopped.returncode == 3
        assert json.loads(stopped.stdout)["state"] == "aborted"
        assert ctl(stack.url, key, "status", rid, "--watch", "--interval", "0.2").returncode == 3
        shown = ctl(stack.url, key, "status", rid).stdout
        assert re.search(r"^aborted by +api:e2e at ", shown, re.MULTILINE), shown
        assert re.search(r"^abort did +\d+ pending cancelled, \d+ in flight sent back", shown, re.MULTILINE), shown

        refused = ctl(stack.url, key, "resume", rid)
        assert refused.returncode == 1
        assert refused.stderr.startswith("error: invalid_state: ")
        assert refused.stdout == ""


def test_a_bad_key_and_the_apis_refusals_exit_1_with_their_code(live_server, tenant, settings):
    settings.ROLLOUT = rollout_settings(downloads_url=f"{live_server.url}/api/compute/downloads")
    _, key = api_key_create(tenant=tenant, username="ci", grants=[Permission.FLEET_ADMIN])
    some_id = str(uuid.uuid4())
    for argv in (["list"], ["wait", some_id], ["status", some_id, "--watch"]):
        bad = ctl(live_server.url, "rk_not_a_key", *argv)
        assert bad.returncode == 1, argv
        assert bad.stderr.startswith("error: authentication_failed: "), bad.stderr
    missing = ctl(live_server.url, key, "wait", some_id)
    assert (missing.returncode, missing.stderr.split(":")[:2]) == (1, ["error", " not_found"])
    unknown = ctl(live_server.url, key, "--output", "json", "create", "9.9.9")
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["code"] == "unknown_version"
    assert unknown.stderr.startswith("error: unknown_version: ")
    empty = ctl(live_server.url, key, "list")
    assert (empty.returncode, empty.stdout.split()) == (0, ["id", "version", "state", "wave", "nodes", "created"])
