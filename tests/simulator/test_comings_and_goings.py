"""Agents that flap after an upgrade, and agents that go offline and return later (against a live server)."""

from __future__ import annotations

import pytest

from demo.processes import wait_until
from fleet.models import NodeSession
from fleet.services.nodes import nodes_set_daemon
from simulator import AgentConfig, AgentState, Fleet, build_agent_configs
from tests.factories import pin
from tests.simulator.conftest import make_nodes

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "heartbeat_seconds": 0.2,
    "restart_delay": 0.1,
    "restart_jitter": 0.0,
    "request_timeout": 5.0,
    "release_pins": [pin(0)],
}


def test_a_flapping_agent_leaves_shortly_after_rejoining_on_the_new_version_then_returns(live_server, pool, binaries):
    [(node, token)] = make_nodes(pool, 1)
    section = binaries.add("1.1.0", b"bcd 1.1.0\n" * 64)
    config = AgentConfig(token=token, name=node.name, flap_after=0.5, flap_down=1.0)
    fleet = Fleet(live_server.url, [config], **FAST)
    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.online_count() == 1, timeout=10)
        nodes_set_daemon(node_ids=[node.pk], daemon=section)
        wait_until(
            lambda: NodeSession.objects.filter(node=node, daemon_version="1.1.0", left_at__isnull=True).exists(),
            what="the agent to rejoin on 1.1.0",
        )
        first_join = NodeSession.objects.get(node=node).joined_at
        wait_until(
            lambda: NodeSession.objects.filter(node=node, left_at__isnull=False).exists(), what="the flap (a leave)"
        )
        wait_until(
            lambda: NodeSession.objects.filter(node=node, left_at__isnull=True, joined_at__gt=first_join).exists(),
            what="the agent to come back",
        )
        assert running.wait_for(lambda f: f.agent(node.name).aways == 1, timeout=10)
    agent = fleet.agent(node.name)
    assert agent.version == "1.1.0"
    assert agent.aways == 1  # once only


def test_an_agent_goes_offline_and_returns_later(live_server, pool):
    nodes = make_nodes(pool, 2)
    configs = [
        AgentConfig(token=nodes[0][1], name=nodes[0][0].name, down_after=0.0, down_for=1.5),  # offline from the start
        AgentConfig(token=nodes[1][1], name=nodes[1][0].name, down_after=0.5, down_for=1.0),
    ]
    fleet = Fleet(live_server.url, configs, **FAST)
    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.agent(nodes[0][0].name).state == AgentState.AWAY, timeout=10)
        assert not NodeSession.objects.filter(node=nodes[0][0]).exists()  # not joined yet
        wait_until(
            lambda: NodeSession.objects.filter(node=nodes[1][0], left_at__isnull=False).exists(),
            what="the second to leave",
        )
        wait_until(lambda: NodeSession.objects.filter(left_at__isnull=True).count() == 2, what="both to be back online")
    assert [fleet.agent(node.name).aways for node, _ in nodes] == [1, 1]


def test_shares_select_flapping_and_going_down_agents():
    configs = build_agent_configs(
        [f"t{i}" for i in range(100)], flap_share=0.1, flap_after=3, down_share=0.2, down_after=1, down_for=9, seed=4
    )
    assert sum(c.flap_after == 3 for c in configs) == 10
    assert sum(c.down_after == 1 and c.down_for == 9 for c in configs) == 20
    assert all(c.flap_after is None for c in configs if c.flap_after != 3)
    with pytest.raises(ValueError, match="down_for"):
        AgentConfig(token="t", down_for=-1)
