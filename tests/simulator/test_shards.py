"""A fleet split over child processes (``ShardedFleet``), against pytest-django's live_server."""

from __future__ import annotations

import os
import signal

import httpx
import pytest
from django.core.management import call_command

from demo.processes import free_port, stop, wait_until, web_server
from fleet.models import NodeSession
from fleet.services.nodes import nodes_set_daemon
from simulator import AgentConfig, EnrolledNode, ShardedFleet, write_tokens
from tests.databases import database_url
from tests.factories import pin
from tests.simulator.conftest import make_nodes

pytestmark = pytest.mark.django_db(transaction=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but was not reaped yet is a zombie: not running.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_agents_split_over_two_processes_upgrade_and_report_into_one_view(live_server, pool, binaries):
    nodes = make_nodes(pool, 12)
    section = binaries.add("1.1.0", b"bcd 1.1.0\n" * 1024)
    configs = [AgentConfig(token=token, name=node.name) for node, token in nodes]
    fleet = ShardedFleet(
        live_server.url,
        configs,
        processes=2,
        report_every=0.1,
        release_pins=[pin(0)],
        heartbeat_seconds=0.3,
        restart_delay=0.1,
        record_latencies=True,
        leave_on_stop=True,
    )
    assert [len(part) for part in fleet.slices] == [6, 6]

    with fleet.start(timeout=120):
        pids = fleet.pids
        assert len(pids) == 2
        assert os.getpid() not in pids
        assert fleet.wait_for(lambda f: f.online_count() == 12, timeout=30), fleet.status_line()
        # Two agents of each process upgrade (slices take every other agent).
        upgraded = [nodes[i][0] for i in (0, 1, 2, 3)]
        nodes_set_daemon(node_ids=[node.pk for node in upgraded], daemon=section)
        assert fleet.wait_for(lambda f: f.versions() == {"1.0.0": 8, "1.1.0": 4}, timeout=30), fleet.status_line()
        wait_until(
            lambda: NodeSession.objects.filter(daemon_version="1.1.0", left_at__isnull=True).count() == 4,
            what="four sessions on 1.1.0",
        )
        line = fleet.status_line()

    assert not any(alive(pid) for pid in pids)
    assert "online 12/12" in line
    assert "1.1.0=4" in line
    stats = fleet.stats
    # The agents leave only once told to stop: only each process's last report can carry these.
    assert stats.leaves == 4 + 12
    assert not NodeSession.objects.filter(left_at__isnull=True).exists()
    assert stats.upgrades == 4
    assert stats.joins >= 12 + 4  # first joins, then the upgraded agents' rejoins
    assert stats.errors == 0, stats.errors_by_kind
    # Every answered heartbeat's latencies came back from the children, the last report included.
    assert len(stats.latencies) == len(stats.round_trips) == stats.heartbeats > 12
    # Each process sends both lists' new entries at once: concatenated, they stay paired.
    assert all(0 < trip <= seen for trip, seen in zip(stats.round_trips, stats.latencies, strict=True))


def test_a_child_that_dies_without_its_last_report_is_an_error_not_a_finish(live_server, pool):
    nodes = make_nodes(pool, 2)
    fleet = ShardedFleet(live_server.url, [AgentConfig(token=t) for _, t in nodes], processes=1, heartbeat_seconds=0.3)
    fleet.start(timeout=60)
    assert fleet.wait_for(lambda f: f.online_count() == 2, timeout=30)
    os.kill(fleet.pids[0], signal.SIGKILL)

    with pytest.raises(RuntimeError, match="ended without its last report"):
        fleet.wait_for(lambda f: False, timeout=30)
    with pytest.raises(RuntimeError, match="crashed"):
        fleet.stop()


def test_a_child_that_cannot_start_its_fleet_is_reported_not_waited_for(live_server):
    # A negative heartbeat is refused by Fleet() in the child: the parent raises, it does not hang.
    fleet = ShardedFleet(live_server.url, [AgentConfig(token="at_x" * 8)], processes=1, heartbeat_seconds=-1)
    with pytest.raises(RuntimeError, match="heartbeat_seconds must be positive"), fleet.start(timeout=30):
        fleet.wait_for(lambda f: f.online_count() == 1, timeout=30)


def test_the_command_runs_its_agents_in_several_processes(live_server, pool, tmp_path, capsys):
    nodes = make_nodes(pool, 6)
    tokens_file = tmp_path / "tokens.json"
    write_tokens(
        tokens_file, [EnrolledNode(name=node.name, id=str(node.pk), pool_id=str(pool.pk), token=t) for node, t in nodes]
    )

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
        "--processes",
        "2",
        "--duration",
        "3",
        "--stats-every",
        "0.5",
    )

    out = capsys.readouterr().out
    assert "simulating 6 agents" in out
    assert "(2 processes)" in out
    assert "online 6/6" in out
    assert out.splitlines()[-1].endswith(", 0 errors")
    assert NodeSession.objects.filter(node__pool=pool, left_at__isnull=True).count() == 6


def test_each_process_talks_to_its_own_address_of_the_server(live_server, pool):
    """Given several base URLs (one server on several addresses), process i uses the i-th: here the second is a
    port nothing listens on, so only the first process's agent comes online."""
    nodes = make_nodes(pool, 2)
    nowhere = f"http://127.0.0.1:{free_port()}"
    fleet = ShardedFleet([live_server.url, nowhere], [AgentConfig(token=t) for _, t in nodes], processes=2,
                         heartbeat_seconds=0.3, report_every=0.1)  # fmt: skip
    with fleet.start(timeout=60):
        assert fleet.wait_for(lambda f: f.online_count() == 1 and f.stats.errors > 0, timeout=30), fleet.status_line()
    online = NodeSession.objects.filter(left_at__isnull=True).values_list("node_id", flat=True)
    assert list(online) == [nodes[0][0].pk]  # slices take every other agent: the first is the first process's


@pytest.mark.integration
def test_the_web_tier_listens_on_each_address_it_is_given(tmp_path, db):
    """The benchmarks' web tier on two loopback addresses (past the ~64,000 connections one address reaches)."""
    env = {
        "DATABASE_URL": database_url(),
        "LOG_LEVEL": "WARNING",
        "ROLLOUT_RUN_DIR": str(tmp_path),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,127.0.0.2",
    }
    port = free_port()
    web = web_server(env, port=port, workers=1, threads=1, log_path=tmp_path / "web.log",
                     addresses=("127.0.0.1", "127.0.0.2"))  # fmt: skip
    try:
        for address in ("127.0.0.1", "127.0.0.2"):
            url = f"http://{address}:{port}/api/compute/pools/"
            wait_until(lambda url=url: _status(url) == 401, timeout=60, what=f"gunicorn on {address}")
    finally:
        stop(web, timeout=5)


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None
