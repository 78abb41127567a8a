"""A restart of the web tier with a few hundred watching simulated agents (docs/fleet.md#retries): every agent is
answered again soon after the tier is back, none waits a whole heartbeat, and all are online, on the server and
in the simulator. The agents are the simulator's (its real HTTP client), the tier is gunicorn's uvicorn worker as
production runs it, stopped with SIGTERM and started again on the same port."""

from __future__ import annotations

import time

import pytest

from demo.processes import free_port, stop, wait_until, web_server
from fleet.models import Node
from fleet.tokens import token_hash
from simulator import AgentConfig, Fleet
from tests.watch.conftest import THREADS, Server, answering, bulk_agents, web_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

AGENTS = 300
# The agents' wait and their backoff's cap: far above the few seconds the tier is down, so that what the test
# sees is the backoff's jitter after a short outage, not its cap (a slow restart on a busy machine lets some
# agents reach the 16 s window; a 30 s cap then let one draw 26 s).
HEARTBEAT_SECONDS = 60


def test_after_a_restart_of_the_web_tier_every_agent_is_back_within_a_heartbeat(tenant, tmp_path):
    tokens = bulk_agents(tenant, AGENTS)
    port = free_port()
    env = web_env(tmp_path, heartbeat_seconds=HEARTBEAT_SECONDS)
    url = f"http://127.0.0.1:{port}"

    def start_tier():
        process = web_server(env, port=port, workers=1, threads=THREADS, log_path=tmp_path / "web.log")
        wait_until(lambda: answering(url), timeout=60, poll=0.05, what="the web tier")
        return process

    process = start_tier()
    server = Server(url=url, pid=process.pid, log=tmp_path / "web.log")
    configs = [AgentConfig(token=token, name=f"agent-{n}", protocol_version=3) for n, token in enumerate(tokens)]
    fleet = Fleet(url, configs, watch=True, start_spread=1.0, seed=3)
    try:
        with fleet.start_thread(timeout=300) as running:
            assert running.wait_for(lambda f: f.online_count() == AGENTS and f.stats.joins == AGENTS, timeout=60)
            server.wait_held(AGENTS)
            stop(process)  # SIGTERM: the held requests are answered, then the process exits
            # The agents find the tier gone: each asks again at once, then backs off.
            assert running.wait_for(lambda f: all(a.consecutive_failures >= 2 for a in f.agents), timeout=30)
            process = start_tier()
            back = time.monotonic()
            server.wait_held(AGENTS, timeout=HEARTBEAT_SECONDS)  # every agent is heard and held again
            slowest = time.monotonic() - back
            # A new spec for every node wakes them all: the simulator hears each answer, and counts it online.
            nodes = Node.objects.filter(agent_token_hash__in=[token_hash(token) for token in tokens])
            nodes.update(spec={"daemon": None, "after": "restart"})
            assert running.wait_for(lambda f: all((a.answered_at or 0) > back for a in f.agents), timeout=10)
            assert fleet.online_count() == AGENTS
        assert slowest < HEARTBEAT_SECONDS / 2, slowest  # none waited half a heartbeat (fixed retry: a whole one)
        assert fleet.stats.errors_by_kind.keys() <= {"session_ConnectError"}, fleet.stats.errors_by_kind
    finally:
        stop(process)
