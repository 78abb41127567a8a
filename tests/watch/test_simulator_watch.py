"""The simulator's ``--watch`` against the real web tier: agents hold their session requests, send almost nothing
while nothing changes, and see a new spec within a second of its commit."""

from __future__ import annotations

import time

import pytest

from fleet.services.nodes import nodes_set_daemon
from simulator import AgentConfig, Fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

DAEMON = {"version": "0.9.0", "url": "http://127.0.0.1:9/bcd/0.9.0/linux-amd64", "sha256": "a" * 64}


def test_watching_agents_are_quiet_until_a_change_then_see_it_at_once(server, agents):
    made = agents(20)
    fleet = Fleet(
        server.url,
        [AgentConfig(token=agent.token, name=agent.node.name, daemon_version="0.9.0") for agent in made],
        heartbeat_seconds=20,  # wait=20: nothing changes within this test, so no held request ends by itself
        start_spread=0.5,
        watch=True,
    )
    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=15)
        server.wait_held(20)
        quiet_from = fleet.stats.heartbeats
        time.sleep(1.5)  # a window in which polling agents would have beaten; watching ones send nothing
        assert fleet.stats.heartbeats == quiet_from
        committed_at = time.monotonic()
        nodes_set_daemon(node_ids=[agent.node.id for agent in made], daemon=DAEMON)
        assert running.wait_for(lambda f: all(a.spec == {"daemon": DAEMON} for a in f.agents), timeout=5)
        seen_after = time.monotonic() - committed_at
        server.wait_held(20)  # and they watch again
    assert seen_after < 1.0, f"all 20 agents had the new spec {seen_after:.3f} s after the commit"
    assert fleet.stats.errors == 0
