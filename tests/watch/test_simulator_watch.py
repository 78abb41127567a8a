"""The simulator's ``--watch`` against the real web tier: agents hold their session requests, send nothing more
while nothing changes, and see a new spec in the answer to the request they hold."""

from __future__ import annotations

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
        nodes_set_daemon(node_ids=[agent.node.id for agent in made], daemon=DAEMON)
        assert running.wait_for(lambda f: all(a.spec == {"daemon": DAEMON} for a in f.agents), timeout=5)
        # Each agent got the change in the answer to the request it held, and sent nothing else meanwhile.
        assert fleet.stats.heartbeats - quiet_from == 20
        server.wait_held(20)  # and they watch again
    # How soon a held agent sees a commit is measured, not asserted: `python -m benchmarks watch` (its wake).
    assert fleet.stats.errors == 0
