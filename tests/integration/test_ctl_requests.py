"""What ``python -m rollout.ctl`` sends and prints, against the live server (no worker: nothing moves unless a
command moves it). The outcomes over simulated agents are in test_ctl_end_to_end.py."""

from __future__ import annotations

import json
import re

import pytest

from fleet.models import Permission
from fleet.services.iam import api_key_create
from rollout.models import Rollout
from tests.factories import fleet, manifest, release_stored, rollout_settings
from tests.integration.test_ctl_end_to_end import ctl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def served(live_server, tenant, settings, tmp_path) -> tuple[str, str]:
    """The live server's URL and an admin key of a tenant with pools gpu-a (2 nodes) and gpu-b (1), and 1.0.0."""
    settings.ROLLOUT = rollout_settings(downloads_url=f"{live_server.url}/api/compute/downloads")
    settings.MEDIA_ROOT = tmp_path
    fleet(tenant, {"gpu-a": (2, "0.5"), "gpu-b": (1, "1")}, version="0.9.0")
    release_stored(manifest("0.9.0", 1, archs=("amd64",)))
    release_stored(manifest("1.0.0", 2, archs=("amd64",)))
    _, key = api_key_create(tenant=tenant, username="ops", grants=[Permission.FLEET_ADMIN])
    return live_server.url, key


def test_create_sends_the_options_given_by_pool_name_and_the_api_root_is_a_server_too(served):
    url, key = served
    created = ctl(
        f"{url}/api/compute/", key, "--output", "json", "create", "1.0.0", "--pools", "gpu-a",
        "--waves", "0.5,100", "--soak", "30", "--timeout", "120", "--max-failure-ratio", "0.25",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    rollout = json.loads(created.stdout)
    assert [w["percent"] for w in rollout["waves"]] == [0.5, 100]
    assert (rollout["soakSeconds"], rollout["upgradeTimeoutSeconds"], rollout["maxFailureRatio"]) == (30, 120, 0.25)
    assert sum(w["total"] for w in rollout["waves"]) == 2  # gpu-a's nodes only
    shown = ctl(url, key, "status", rollout["id"])
    assert re.search(r"^pools +gpu-a *$", shown.stdout, re.MULTILINE), shown.stdout  # by name


def test_a_pool_name_that_is_no_pool_is_refused_before_anything_is_created(served):
    refused = ctl(*served, "create", "1.0.0", "--pools", "gpu-a,gpu-z")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: unknown_pool: No pool is named 'gpu-z' (nor has that id).",
        "  poolIds: gpu-z",
    ]
    assert not Rollout.objects.exists()


def test_the_dry_run_prints_the_plan_or_the_apis_json_and_creates_nothing(served):
    planned = ctl(*served, "create", "1.0.0", "--waves", "50,100", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("dry run: 3 nodes to bcd 1.0.0, estimated ")
    assert re.search(r"^ +1 +50 +2( +\d+){2} *$", planned.stdout, re.MULTILINE), planned.stdout
    as_json = ctl(*served, "--output", "json", "create", "1.0.0", "--dry-run")
    assert json.loads(as_json.stdout)["nodes"] == 3
    assert not Rollout.objects.exists()


def test_pause_resume_abort_list_and_nodes_and_an_api_error_with_its_fields(served):
    url, key = served
    first = json.loads(ctl(url, key, "--output", "json", "create", "1.0.0", "--pools", "gpu-a").stdout)["id"]
    second = json.loads(ctl(url, key, "--output", "json", "create", "1.0.0", "--pools", "gpu-b").stdout)["id"]

    paused = ctl(url, key, "pause", first)
    assert (paused.returncode, paused.stdout.split()[:2]) == (0, [first, "paused"])
    assert paused.stdout.rstrip().endswith("(operator)")
    shown = ctl(url, key, "status", first)
    assert re.search(r"^waiting +\S", shown.stdout, re.MULTILINE), shown.stdout  # the rollout's blocker
    resumed = ctl(url, key, "resume", first)
    assert (resumed.returncode, resumed.stdout.split()[:2]) == (0, [first, "active"])
    aborted = ctl(url, key, "abort", second)
    assert (aborted.returncode, aborted.stdout.split()[:2]) == (0, [second, "aborted"])

    # Every page, the filter kept: one rollout a page.
    active = ctl(url, key, "--output", "json", "list", "--state", "active", "--page-size", "1")
    assert [r["id"] for r in json.loads(active.stdout)["results"]] == [first]
    every = ctl(url, key, "--output", "json", "list", "--page-size", "1")
    assert sorted(r["id"] for r in json.loads(every.stdout)["results"]) == sorted([first, second])
    assert json.loads(every.stdout)["next"] is None

    pending = ctl(url, key, "--output", "json", "nodes", first, "--state", "pending", "--wave", "1", "--page-size", "1")
    rows = json.loads(pending.stdout)["results"]
    assert [(r["state"], r["wave"]) for r in rows] == [("pending", 0)] * len(rows)
    assert rows
    table = ctl(url, key, "nodes", first)
    assert table.stdout.split()[:7] == ["node", "id", "wave", "state", "previous", "reason", "waiting"]
    assert table.stdout.count("pending") == 2
    assert table.stdout.count("gpu-a-") == 2  # the nodes' names beside their ids
    every_row = json.loads(ctl(url, key, "--output", "json", "nodes", first).stdout)["results"]
    shown_waves = [line.split()[2] for line in table.stdout.splitlines()[1:]]
    assert shown_waves == [str(r["wave"] + 1) for r in every_row]  # waves counted from 1
    waves = len(json.loads(ctl(url, key, "--output", "json", "status", first).stdout)["waves"])
    beyond = ctl(url, key, "nodes", first, "--wave", str(waves + 1))
    assert (beyond.returncode, beyond.stdout) == (1, "")
    assert beyond.stderr.startswith(f"error: invalid_wave: Wave {waves + 1} is out of range: the rollout has {waves}")

    # The same nodes again: 409 conflict, its fields printed under its code and detail.
    conflict = ctl(url, key, "create", "1.0.0", "--pools", "gpu-a")
    assert conflict.returncode == 1
    lines = conflict.stderr.splitlines()
    assert lines[0].startswith("error: conflict: ")
    assert f"  rolloutIds: {first}" in lines
    assert any(line.startswith("  nodeIds: ") for line in lines)
    as_json = ctl(url, key, "--output", "json", "create", "1.0.0", "--pools", "gpu-a")
    assert json.loads(as_json.stdout)["rolloutIds"] == [first]
    again = ctl(url, key, "abort", second, "--rollback")
    assert again.returncode == 1
    assert again.stderr.startswith("error: invalid_state: ")


def test_create_with_gates_and_status_shows_them(served, settings):
    url, key = served
    settings.ROLLOUT_PROMETHEUS_URL = "http://127.0.0.1:9"  # never asked here: no worker runs
    created = ctl(
        url, key, "--output", "json", "create", "1.0.0", "--pools", "gpu-a",
        "--gate", "errors:prometheus=sum(rate(http_5xx[5m]))<=0.01", "--gate-interval", "15",
        "--gate-failure-limit", "4",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    rollout = json.loads(created.stdout)
    assert (rollout["gateIntervalSeconds"], rollout["gateFailureLimit"]) == (15, 4)
    shown = ctl(url, key, "status", rollout["id"])
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^gates *$", shown.stdout, re.MULTILINE), shown.stdout
    assert re.search(r"^errors +\w+", shown.stdout, re.MULTILINE), shown.stdout

    nine = [arg for i in range(9) for arg in ("--gate", f"g{i}:prometheus=up<=1")]
    refused = ctl(url, key, "create", "1.0.0", "--pools", "gpu-b", *nine)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: invalid_gate: ")
