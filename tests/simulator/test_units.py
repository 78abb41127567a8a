"""The simulator's pieces without a server: share selection, configs, token files, robustness.

Downloads: test_downloads.py.

The robustness and command-ack tests talk to a fake agent API through httpx.MockTransport.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import httpx
import pytest

from simulator import (
    NEVER_REJOIN,
    REJOIN_OLD,
    AgentConfig,
    AgentState,
    Fleet,
    SimulatorError,
    build_agent_configs,
    default_max_connections,
    read_tokens,
    select_share,
    write_tokens,
)
from simulator import EnrolledNode as Enrolled
from tests.factories import pin
from tests.simulator.conftest import signed_section

PAST = datetime(2020, 1, 1, tzinfo=UTC)

KEYS = [f"node-{i:04d}" for i in range(1000)]


# --- deterministic selection --------------------------------------------------------------


def test_select_share_is_exact_and_deterministic_by_seed():
    chosen = select_share(KEYS, 0.05, seed=7, salt="fail")
    assert len(chosen) == 50
    assert chosen == select_share(KEYS, 0.05, seed=7, salt="fail")
    assert chosen == select_share(list(reversed(KEYS)), 0.05, seed=7, salt="fail")  # order does not matter
    assert chosen != select_share(KEYS, 0.05, seed=8, salt="fail")
    assert chosen != select_share(KEYS, 0.05, seed=7, salt="offline")


def test_a_larger_share_selects_a_superset():
    assert select_share(KEYS, 0.01, seed=3) <= select_share(KEYS, 0.1, seed=3) <= select_share(KEYS, 0.5, seed=3)


@pytest.mark.parametrize(("share", "count"), [(0, 0), (1, 1000), (0.0005, 1), (0.0004, 0), (0.333, 333)])
def test_select_share_rounds_to_the_nearest_count(share, count):
    assert len(select_share(KEYS, share, seed=0)) == count


@pytest.mark.parametrize("share", [-0.1, 1.01])
def test_select_share_refuses_a_share_outside_0_1(share):
    with pytest.raises(ValueError, match="share"):
        select_share(KEYS, share, seed=0)


def test_fail_share_alone_fails_every_upgrade_of_the_chosen_agents():
    configs = build_agent_configs([(key, f"tok-{key}") for key in KEYS[:100]], fail_share=0.1, seed=1)
    failing = [config for config in configs if config.fail_mode]
    assert len(failing) == 10
    assert all(config.failure_for("9.9.9") == NEVER_REJOIN for config in failing)
    assert {config.name for config in failing} == select_share(KEYS[:100], 0.1, seed=1, salt="fail")


def test_fail_version_alone_fails_every_agent_on_that_version_only():
    configs = build_agent_configs(["t1", "t2"], fail_version="1.1.0", fail_mode=REJOIN_OLD)
    assert [config.failure_for("1.1.0") for config in configs] == [REJOIN_OLD, REJOIN_OLD]
    assert [config.failure_for("1.2.0") for config in configs] == [None, None]


def test_fail_share_and_version_fail_the_share_on_that_version():
    configs = build_agent_configs(KEYS, fail_share=0.2, fail_version="2.0.0", seed=5)
    assert sum(config.failure_for("2.0.0") is not None for config in configs) == 200
    assert all(config.failure_for("3.0.0") is None for config in configs)


def test_offline_share_is_seeded_and_independent_of_failures():
    configs = build_agent_configs(KEYS, offline_share=0.25, fail_share=0.25, seed=2)
    offline = {config.token for config in configs if config.offline}
    failing = {config.token for config in configs if config.fail_mode}
    assert len(offline) == len(failing) == 250
    assert offline != failing
    assert offline == {c.token for c in build_agent_configs(KEYS, offline_share=0.25, seed=2) if c.offline}


def test_a_bad_fail_mode_is_refused():
    with pytest.raises(ValueError, match="fail_mode"):
        AgentConfig(token="t", fail_mode="explode")


# --- token files ---------------------------------------------------------------------------


def test_tokens_round_trip_through_the_json_file(tmp_path):
    path = tmp_path / "tokens.json"
    write_tokens(path, [Enrolled(name="a", id="1", pool_id="p", token="at_1")])
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_tokens(path) == [("a", "at_1")]


@pytest.mark.parametrize(
    "text",
    [
        "at_1\n\n# comment\nat_2\n",
        json.dumps(["at_1", "at_2"]),
        json.dumps({"tokens": ["at_1", "at_2"]}),
        '{"token": "at_1"}\n{"token": "at_2"}\n',
    ],
)
def test_tokens_are_read_per_line_or_as_json(tmp_path, text):
    path = tmp_path / "tokens"
    path.write_text(text)
    assert [token for _, token in read_tokens(path)] == ["at_1", "at_2"]


def test_an_empty_tokens_file_is_refused(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("\n# nothing\n")
    with pytest.raises(SimulatorError, match="no tokens"):
        read_tokens(path)


# --- a fake agent API: robustness and the command path --------------------------------------


class FakeServer:
    """Just enough of the agent API for one agent, recording every call."""

    def __init__(self, *, failures: list[object] | None = None) -> None:
        self.failures = list(failures or [])  # what the next session calls do instead of answering
        self.spec: dict = {"daemon": None}
        self.commands: list[dict] = []
        self.next_commands: list[dict] = []  # delivered once every command is acked
        self.binaries: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, object]] = []
        self.root_version = 1  # rootVersion of every session answer
        self.roots: list[dict] = []  # root envelopes 2, 3, ... served by GET agent/release-roots, one per page

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path, body))
        if request.url.path in self.binaries:
            return httpx.Response(200, content=self.binaries[request.url.path])
        if request.url.path == "/api/compute/agent/session":
            if request.method == "DELETE":
                return httpx.Response(204)
            if self.failures:
                failure = self.failures.pop(0)
                if isinstance(failure, Exception):
                    raise failure
                return failure
            answer = {"spec": self.spec, "commands": self.commands, "heartbeatSeconds": 10}
            return httpx.Response(200, json={**answer, "rootVersion": self.root_version})
        if request.url.path == "/api/compute/agent/release-roots":
            after = int(request.url.params.get("after", "0"))
            rest = self.roots[max(after, 1) - 1 :]
            following = f"/api/compute/agent/release-roots?after={after + 1}" if len(rest) > 1 else None
            return httpx.Response(200, json={"results": rest[:1], "next": following})
        if request.url.path.endswith("/ack"):
            command_id = request.url.path.split("/")[-2]
            self.commands = [command for command in self.commands if command["id"] != command_id]
            if not self.commands:
                self.commands, self.next_commands = self.next_commands, []
            return httpx.Response(200, json={"id": command_id})
        return httpx.Response(404, json={"code": "not_found"})

    def session_posts(self) -> list[dict]:
        return [body for method, path, body in self.calls if method == "POST" and path.endswith("/session")]


def run_fake(server: FakeServer, config: AgentConfig, until, **options) -> Fleet:
    async def scenario() -> Fleet:
        client = httpx.AsyncClient(transport=httpx.MockTransport(server))
        options.setdefault("release_pins", [pin(0)])
        fleet = Fleet("http://server", [config], heartbeat_seconds=0.01, restart_delay=0, client=client, **options)
        assert await fleet.run(until=until, timeout=10)
        await client.aclose()
        return fleet

    return asyncio.run(scenario())


def test_failed_calls_are_counted_and_retried_at_the_next_beat():
    server = FakeServer(
        failures=[
            httpx.Response(500, text="boom"),
            httpx.ConnectError("refused"),
            httpx.ReadTimeout("slow"),
            httpx.Response(200, text="not json"),
            httpx.Response(200, json=["not", "an", "object"]),
        ]
    )
    fleet = run_fake(server, AgentConfig(token="t"), until=lambda f: f.agents[0].heartbeats >= 3)
    agent = fleet.agents[0]
    assert agent.online
    assert agent.errors == fleet.stats.errors == 5
    assert set(fleet.stats.errors_by_kind) == {
        "session_500",
        "session_ConnectError",
        "session_ReadTimeout",
        "session_bad_body",
    }
    # Every call either failed (and was retried at the next beat) or was a heartbeat; the fleet
    # stops a beat or so after the condition holds, so count the heartbeats rather than assume 3.
    assert agent.heartbeats >= 3
    assert len(server.session_posts()) == 5 + agent.heartbeats


def upgrade_command(command_id: str, version: str, signed_bytes: bytes) -> dict:
    """A daemon.upgrade of ``version`` whose signed manifest names ``signed_bytes`` (whatever the URL serves)."""
    section = signed_section(version, signed_bytes, url=f"http://server/bcd/{version}/linux-amd64")
    return {"id": command_id, "kind": "daemon.upgrade", "payload": section}


def test_an_old_agent_acks_a_bad_binary_as_failed_and_a_good_one_before_restarting():
    good = b"good"
    server = FakeServer()
    server.binaries = {"/bcd/2/linux-amd64": good, "/bcd/3/linux-amd64": b"tampered"}
    server.spec = {"daemon": signed_section("3", b"x", url="http://server/bcd/3/linux-amd64")}
    server.commands = [upgrade_command("c-bad", "3", good), {"id": "c-odd", "kind": "node.reboot"}]
    server.next_commands = [upgrade_command("c-good", "2", good)]  # once those are acked
    fleet = run_fake(
        server,
        AgentConfig(token="t", protocol_version=1),
        until=lambda f: f.agents[0].version == "2" and f.agents[0].state == AgentState.ONLINE,
    )
    agent = fleet.agents[0]
    assert agent.acked == {"c-bad": False, "c-odd": False, "c-good": True}
    # The command's bytes are not what its sha256 says, 3 times: a failed download (spec.daemon is ignored at
    # protocol 1).
    assert [r.reason for r in agent.refusals] == ["download_failed"]
    acks = [(path.split("/")[-2], body) for _, path, body in server.calls if path.endswith("/ack")]
    assert [command_id for command_id, _ in acks] == ["c-bad", "c-odd", "c-good"]
    assert acks[0][1]["ok"] is False
    assert "download_failed" in acks[0][1]["error"]
    assert acks[1][1] == {"ok": False, "error": "unknown command kind 'node.reboot'"}
    assert acks[2][1] == {"ok": True}
    # The good command: acked ok, then DELETE session, then the rejoin on the new version.
    calls = [(method, path) for method, path, _ in server.calls]
    good_ack = calls.index(("POST", "/api/compute/agent/commands/c-good/ack"))
    assert calls[good_ack + 1 : good_ack + 3] == [
        ("DELETE", "/api/compute/agent/session"),
        ("POST", "/api/compute/agent/session"),
    ]
    assert server.session_posts()[-1]["daemonVersion"] == "2"


def test_never_rejoin_leaves_and_stays_down():
    server = FakeServer()
    server.binaries = {"/b": b"new"}
    server.spec = {"daemon": signed_section("2", b"new", url="http://server/b")}
    fleet = run_fake(
        server, AgentConfig(token="t", fail_mode=NEVER_REJOIN), until=lambda f: f.agents[0].state == AgentState.DOWN
    )
    assert [method for method, path, _ in server.calls if path.endswith("/session")] == ["POST", "DELETE"]
    assert fleet.agents[0].version == "1.0.0"
    assert fleet.stats.failed_upgrades == 1


# --- the connection pool is also the in-flight limit ----------------------------------------


@pytest.mark.parametrize(("agents", "pool"), [(1, 8), (50, 8), (600, 10), (1000, 16), (100_000, 16)])
def test_the_default_pool_grows_with_the_fleet_within_bounds(agents, pool):
    assert default_max_connections(agents) == pool


def test_requests_in_flight_never_exceed_the_pool():
    in_flight, peak = 0, 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx.Response(200, json={"spec": {"daemon": None}, "commands": [], "heartbeatSeconds": 10})

    async def scenario() -> Fleet:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            fleet = Fleet(
                "http://server",
                [AgentConfig(token=f"t{i}") for i in range(100)],
                heartbeat_seconds=0.05,
                max_connections=5,
                client=client,
            )
            assert await fleet.run(until=lambda f: f.stats.heartbeats >= 300, timeout=20)
            return fleet

    fleet = asyncio.run(scenario())
    assert peak == 5
    assert fleet.online_count() == 100
