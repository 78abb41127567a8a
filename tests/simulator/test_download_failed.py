"""Downloads that fail are reported (docs/simulator.md#downloads, docs/signing.md#what-an-agent-checks).

A 4xx answer is reported at once as ``refused: {"code": "download_failed", "detail": "HTTP 404"}``, and the
server fails the upgrade with ``refused:download_failed`` without waiting for its timeout; bytes unlike the
spec's sha256 are fetched 3 times (with backoff) before the same report; a 5xx is retried at the next beat
and never reported.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings

from demo.processes import wait_until
from fleet.services.nodes import nodes_set_daemon
from fleet.services.pools import pool_create
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, binary_storage_name
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from simulator import AgentConfig, Fleet
from tests.factories import manifest, pin, release_stored, rollout_settings
from tests.simulator.conftest import make_nodes

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "heartbeat_seconds": 0.3,
    "restart_delay": 0.1,
    "restart_jitter": 0.1,
    "request_timeout": 5.0,
    "release_pins": [pin(0)],
}


@pytest.mark.usefixtures("settings_media")
def test_agents_report_a_404_and_their_upgrades_fail_at_once(live_server, tenant):
    """The release was uploaded when the rollout was created; its bytes are gone when the agents fetch them."""
    pool = pool_create(tenant=tenant, name="all-at-once", disruption_budget=Decimal(1))
    release_stored(manifest("1.0.0", 1, archs=("amd64",)))
    release_stored(manifest("1.1.0", 2, archs=("amd64",)))
    nodes = make_nodes(pool, 3)
    fleet = Fleet(live_server.url, [AgentConfig(token=token, name=node.name) for node, token in nodes], **FAST)
    with fleet.start_thread(timeout=120) as running:
        assert running.wait_for(lambda f: f.online_count() == 3, timeout=30)
        rollout = rollout_create(
            tenant=pool.tenant, spec=rollout_spec(version="1.1.0", waves=[100], upgrade_timeout_seconds=3600)
        )
        Path(settings.MEDIA_ROOT, binary_storage_name("1.1.0", "linux-amd64")).unlink()
        rollout_tick(rollout_id=rollout.id)
        assert NodeUpgrade.objects.filter(rollout=rollout, state="in_flight").count() == 3

        def failed() -> int:
            return NodeUpgrade.objects.filter(rollout=rollout, state="failed", reason="refused:download_failed").count()

        wait_until(lambda: failed() == 3, timeout=30, what="3 upgrades failed with refused:download_failed")
        assert running.wait_for(lambda f: all(f.agent(node.name).refusals for node, _ in nodes), timeout=10)

    refusals = [refusal for node, _ in nodes for refusal in fleet.agent(node.name).refusals]
    assert {(refusal.version, refusal.reason, refusal.detail) for refusal in refusals} == {
        ("1.1.0", "download_failed", "HTTP 404")
    }
    events = RolloutEvent.objects.filter(rollout=rollout, kind="node_upgrade.refused")
    assert {(event.data["code"], event.data["detail"]) for event in events} == {("download_failed", "HTTP 404")}
    assert {agent.version for agent in fleet.agents} == {"1.0.0"}  # they kept running what they ran
    rollout_tick(rollout_id=rollout.id)  # counted in the failure ratio: 3 of 3 failed pauses it
    assert Rollout.objects.get(pk=rollout.pk).paused_reason == "failure_ratio"


def test_bytes_unlike_the_spec_are_fetched_three_times_then_reported(live_server, pool, binaries):
    (node, token), *_ = make_nodes(pool, 1)
    section = binaries.add("1.1.0", b"bcd 1.1.0\n" * 512, sequence=2)
    binaries.files["/bcd/1.1.0/linux-amd64"] = b"damaged in transit\n" * 512  # same URL, other bytes
    fleet = Fleet(live_server.url, [AgentConfig(token=token, name=node.name)], **FAST)
    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.online_count() == 1, timeout=30)
        nodes_set_daemon(node_ids=[node.pk], daemon=section)
        assert running.wait_for(lambda f: f.agent(node.name).refusals, timeout=30)
    (refusal,) = fleet.agent(node.name).refusals
    assert refusal.reason == "download_failed"
    assert "after 3 attempts" in refusal.detail
    assert binaries.hits_for(section) == 3


def test_a_5xx_is_retried_and_never_reported(live_server, pool, binaries):
    (node, token), *_ = make_nodes(pool, 1)
    section = binaries.add("1.1.0", b"bcd 1.1.0\n" * 512, sequence=2)
    binaries.statuses["/bcd/1.1.0/linux-amd64"] = 503
    fleet = Fleet(live_server.url, [AgentConfig(token=token, name=node.name)], **FAST)
    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.online_count() == 1, timeout=30)
        nodes_set_daemon(node_ids=[node.pk], daemon=section)
        wait_until(lambda: binaries.hits_for(section) >= 3, timeout=30, what="three tries of the download")
        del binaries.statuses["/bcd/1.1.0/linux-amd64"]  # the server recovers: the next beat gets the bytes
        assert running.wait_for(lambda f: f.agent(node.name).version == "1.1.0", timeout=30)
    assert fleet.agent(node.name).refusals == []


@pytest.fixture
def settings_media(settings, live_server, tmp_path):
    settings.ROLLOUT = rollout_settings(downloads_url=f"{live_server.url}/api/compute/downloads")
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings
