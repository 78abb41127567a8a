"""The simulated agents honour Retry-After (a 429 is waited out, then the same request is sent again), and the
simulator runs until its --duration even when every agent has gone down for good."""

from __future__ import annotations

import asyncio
import time

import pytest

from simulator import AgentConfig, Fleet
from simulator.cli import main
from simulator.retry import retry_after
from tests.factories import pin
from tests.simulator.conftest import make_nodes

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_agent_over_its_limit_waits_its_retry_after_instead_of_hammering(live_server, pool, settings):
    settings.AGENT_TOKEN_RATE = "4/s"  # the agent below tries 20 per second
    [(node, token)] = make_nodes(pool, 1)
    fleet = Fleet(live_server.url, [AgentConfig(token=token, name=node.name)], heartbeat_seconds=0.05, jitter=0)
    started = time.monotonic()
    asyncio.run(fleet.run(timeout=3))
    elapsed = time.monotonic() - started
    # Each 429 is followed by a wait of its Retry-After (1 s here): about one per second, never 20 per second.
    assert 1 <= fleet.stats.throttled <= elapsed + 1, (fleet.stats.throttled, elapsed)
    assert fleet.stats.heartbeats >= 4
    assert fleet.stats.errors == 0  # a 429 waited out is not an agent error
    assert fleet.agents[0].online


@pytest.mark.parametrize(
    ("header", "seconds"), [("7", 7.0), ("0", 0.0), (None, 1.0), ("soon", 1.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)]
)
def test_retry_after_values(header, seconds):
    assert retry_after(header) == seconds


def test_the_simulator_runs_until_its_duration_when_every_agent_is_down_for_good(tmp_path, capsys):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("t-1\nt-2\n")
    started = time.monotonic()
    status = main(
        [
            "--server",
            "http://127.0.0.1:9",
            "--tokens-file",
            str(tokens),
            "--release-pin",
            pin(0),
            "--offline-share",
            "1",
            "--duration",
            "1.5",
        ]
    )
    assert status == 0
    assert time.monotonic() - started >= 1.5
    assert "done:" in capsys.readouterr().out
