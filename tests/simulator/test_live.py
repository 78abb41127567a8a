"""The simulator against a real server: pytest-django's live_server (a threaded HTTP server on loopback).

Short heartbeats (0.2 s) and restarts (0.1-0.2 s); every wait is a poll with a deadline.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.core.management import call_command

from demo.processes import wait_until
from fleet.models import Command, NodeSession
from fleet.services.commands import command_enqueue
from fleet.services.nodes import nodes_set_daemon
from simulator import NEVER_REJOIN, REJOIN_OLD, AgentConfig, AgentState, Fleet
from tests.factories import pin
from tests.simulator.conftest import make_nodes

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "heartbeat_seconds": 0.2,
    "restart_delay": 0.1,
    "restart_jitter": 0.1,
    "request_timeout": 5.0,
    "release_pins": [pin(0)],
}


def session(node) -> NodeSession:
    return NodeSession.objects.get(node=node)


def test_fifty_agents_one_upgrades_failures_do_not_and_bytes_not_signed_are_refused(live_server, pool, binaries):
    nodes = make_nodes(pool, 50)
    section = binaries.add("1.1.0", b"bcd 1.1.0\n" * 4096, sequence=2)
    # Other bytes at another URL, with a spec.daemon.sha256 that matches them: only the signed manifest tells.
    other = binaries.add("1.1.0-other", b"not bcd 1.1.0\n" * 4096)
    configs = [AgentConfig(token=token, name=node.name) for node, token in nodes]
    good, never, old, wrong = (nodes[i][0] for i in range(4))
    configs[1] = dataclasses.replace(configs[1], fail_mode=NEVER_REJOIN)
    configs[2] = dataclasses.replace(configs[2], fail_mode=REJOIN_OLD, fail_versions=frozenset({"1.1.0"}))
    # 0.5 s: the live server (one Python process, a new database connection per request) answers
    # about 50 heartbeats/s on 2 cores; 50 agents at 0.2 s would only queue.
    fleet = Fleet(live_server.url, configs, **{**FAST, "heartbeat_seconds": 0.5})

    with fleet.start_thread(timeout=120) as running:
        wait_until(
            lambda: NodeSession.objects.filter(left_at__isnull=True, daemon_version="1.0.0").count() == 50,
            what="50 agents to join on 1.0.0",
        )
        assert running.wait_for(lambda f: f.online_count() == 50, timeout=10)
        joined_at = {node.pk: session(node).joined_at for node in (good, never, old, wrong)}

        nodes_set_daemon(node_ids=[good.pk, never.pk, old.pk], daemon=section)
        nodes_set_daemon(node_ids=[wrong.pk], daemon={**section, "url": other["url"], "sha256": other["sha256"]})

        wait_until(
            lambda: session(good).daemon_version == "1.1.0" and session(good).left_at is None,
            what="the good agent to rejoin on 1.1.0",
        )
        wait_until(lambda: session(never).left_at is not None, what="the never_rejoin agent to leave")
        assert running.wait_for(lambda f: f.agent(never.name).state == AgentState.DOWN, timeout=10)
        wait_until(
            lambda: session(old).left_at is None and session(old).joined_at > joined_at[old.pk],
            what="the rejoin_old agent to rejoin",
        )
        assert running.wait_for(lambda f: f.agent(wrong.name).refusals, timeout=10)
        # A few more beats: nothing changes any more for the failed, refused and untouched agents.
        beats = {name: fleet.agent(name).heartbeats for name in (old.name, wrong.name, nodes[10][0].name)}
        assert running.wait_for(
            lambda f: all(f.agent(name).heartbeats >= count + 3 for name, count in beats.items()), timeout=10
        )

    # The server's view.
    assert session(good).daemon_version == "1.1.0"
    assert session(never).daemon_version == "1.0.0"
    assert session(never).left_at is not None
    assert session(old).daemon_version == "1.0.0"
    assert session(old).left_at is None
    assert session(wrong).daemon_version == "1.0.0"
    assert session(wrong).left_at is None
    assert session(wrong).joined_at == joined_at[wrong.pk]  # it never left
    others = [node.pk for node, _ in nodes[4:]]
    assert NodeSession.objects.filter(node_id__in=others, daemon_version="1.0.0", left_at__isnull=True).count() == 46

    # The simulator's view.
    agent = fleet.agent
    assert (agent(good.name).version, agent(good.name).upgrades_done, agent(good.name).confirmed_sequence) == (
        "1.1.0",
        1,
        2,
    )
    assert [u.outcome for u in agent(never.name).upgrades] == ["never_rejoin"]
    assert [u.outcome for u in agent(old.name).upgrades] == ["rejoin_old"]  # tried once, not in a loop
    assert agent(old.name).version == "1.0.0"
    assert agent(old.name).state == AgentState.ONLINE
    assert [r.reason for r in agent(wrong.name).refusals] == ["digest_mismatch"]  # recorded once
    assert agent(wrong.name).upgrades == []
    assert agent(wrong.name).version == "1.0.0"
    assert fleet.versions() == {"1.0.0": 48, "1.1.0": 1}
    assert fleet.census() == (fleet.online_count(), fleet.versions(), fleet.states())  # what a shard reports
    # Each agent downloads its own bytes (the default): the three given the section once each, and the one
    # given the other URL (its bytes match spec.daemon.sha256, not the signed manifest).
    assert binaries.hits_for(section) == 3
    assert binaries.hits_for(other) == 1
    assert fleet.stats.downloads == 4
    assert fleet.stats.download_cache_hits == 0
    assert fleet.stats.download_bytes == 3 * len(b"bcd 1.1.0\n" * 4096) + len(b"not bcd 1.1.0\n" * 4096)
    assert fleet.stats.errors == 0, fleet.stats.errors_by_kind


def test_a_confirmed_release_refuses_a_lower_sequence_learned_from_signed_releases_only(live_server, pool, binaries):
    """No API key: the upgrader confirms the sequence of the release it installed, the starter the one of the
    release its spec names for the version it runs (once it verifies); both then refuse a lower one."""
    (upgrader, upgrader_token), (starter, starter_token) = make_nodes(pool, 2)
    v5 = binaries.add("5.0.0", b"bcd 5\n" * 100, sequence=5)
    v4 = binaries.add("4.0.0", b"bcd 4\n" * 100, sequence=4)
    configs = [
        AgentConfig(token=upgrader_token, name=upgrader.name, daemon_version="1.0.0"),
        AgentConfig(token=starter_token, name=starter.name, daemon_version="5.0.0"),
    ]
    fleet = Fleet(live_server.url, configs, **FAST)

    with fleet.start_thread(timeout=60) as running:
        nodes_set_daemon(node_ids=[upgrader.pk, starter.pk], daemon=v5)
        wait_until(
            lambda: NodeSession.objects.filter(node=upgrader, daemon_version="5.0.0", left_at__isnull=True).exists(),
            what="the agent to rejoin on 5.0.0",
        )
        assert running.wait_for(lambda f: f.agent(upgrader.name).confirmed_sequence == 5, timeout=10)
        assert running.wait_for(lambda f: f.agent(starter.name).confirmed_sequence == 5, timeout=10)

        nodes_set_daemon(node_ids=[upgrader.pk, starter.pk], daemon=v4)
        assert running.wait_for(
            lambda f: f.agent(upgrader.name).refusals and f.agent(starter.name).refusals, timeout=10
        )

    for node in (upgrader, starter):
        agent = fleet.agent(node.name)
        assert [(r.version, r.reason) for r in agent.refusals] == [("4.0.0", "sequence_rollback")]
        assert agent.version == "5.0.0"
        assert session(node).daemon_version == "5.0.0"
        assert session(node).left_at is None
    assert binaries.hits_for(v5) == 1
    assert binaries.hits_for(v4) == 0  # refused before downloading
    assert not [call for call in fleet.stats.errors_by_kind if "release" in call]


def test_an_old_agent_ignores_spec_and_upgrades_on_the_daemon_upgrade_command(live_server, pool, binaries):
    [(node, token)] = make_nodes(pool, 1)
    section = binaries.add("1.1.0", b"bcd 1.1.0 for old agents\n")
    fleet = Fleet(live_server.url, [AgentConfig(token=token, name=node.name, protocol_version=1)], **FAST)

    with fleet.start_thread(timeout=60) as running:
        assert running.wait_for(lambda f: f.online_count() == 1, timeout=10)
        nodes_set_daemon(node_ids=[node.pk], daemon=section)
        beats = fleet.agent(node.name).heartbeats
        assert running.wait_for(lambda f: f.agent(node.name).heartbeats >= beats + 5, timeout=10)
        assert fleet.agent(node.name).version == "1.0.0"  # protocolVersion 1 does not apply spec.daemon
        assert binaries.hits_for(section) == 0

        command = command_enqueue(node_id=node.pk, kind=Command.Kind.DAEMON_UPGRADE, payload=section)
        wait_until(lambda: session(node).daemon_version == "1.1.0", what="the old agent to rejoin on 1.1.0")
        # Acked ok, then done when the agent rejoined on the payload's version.
        wait_until(lambda: Command.objects.get(pk=command.pk).state == Command.State.DONE, what="the command done")

    agent = fleet.agent(node.name)
    assert agent.acked == {str(command.pk): True}
    assert [(u.to_version, u.source, u.outcome) for u in agent.upgrades] == [("1.1.0", "command", "upgraded")]
    assert Command.objects.get(pk=command.pk).acked_at is not None


def test_offline_agents_never_join(live_server, pool):
    nodes = make_nodes(pool, 4)
    configs = [AgentConfig(token=token, name=node.name, offline=i < 2) for i, (node, token) in enumerate(nodes)]
    fleet = Fleet(live_server.url, configs, **FAST)
    with fleet.start_thread(timeout=30) as running:
        assert running.wait_for(lambda f: all(f.agent(n.name).heartbeats >= 3 for n, _ in nodes[2:]), timeout=10)
    assert set(NodeSession.objects.values_list("node__name", flat=True)) == {n.name for n, _ in nodes[2:]}
    assert fleet.states()[AgentState.OFFLINE] == 2


def test_the_command_enrolls_nodes_and_runs_their_agents(live_server, tenant, operator_key, tmp_path, capsys):
    tokens_file = tmp_path / "tokens.json"
    call_command(
        "simulate_agents",
        "--server",
        live_server.url,
        "--api-key",
        operator_key,
        "--release-pin",
        pin(0),
        "--enroll",
        "--count",
        "6",
        "--pools",
        "sim-x,sim-y",
        "--create-pools",
        "--tokens-file",
        str(tokens_file),
        "--name-prefix",
        "cli-",
        "--heartbeat-seconds",
        "0.2",
        "--offline-share",
        "0.5",
        "--duration",
        "2",
        "--stats-every",
        "0.5",
    )
    out = capsys.readouterr().out
    rows = json.loads(tokens_file.read_text())
    assert sorted(row["name"] for row in rows) == [f"cli-{i:05d}" for i in range(6)]
    assert tokens_file.stat().st_mode & 0o077 == 0
    assert "enrolled 6 nodes into sim-x, sim-y" in out
    assert "online 3/6" in out
    assert "done:" in out
    # Spread over both pools; exactly half of them (seeded) joined.
    assert {row["poolId"] for row in rows} == set(map(str, tenant.pools.values_list("id", flat=True)))
    assert NodeSession.objects.filter(node__tenant=tenant).count() == 3

    # Again from the tokens file: the same agents (seed 0: the same half is offline).
    call_command(
        "simulate_agents",
        "--server",
        live_server.url,
        "--tokens-file",
        str(tokens_file),
        "--release-pin",
        pin(0),
        "--heartbeat-seconds",
        "0.2",
        "--offline-share",
        "0.5",
        "--duration",
        "1",
        "--stats-every",
        "5",
    )
    assert NodeSession.objects.filter(node__tenant=tenant).count() == 3
