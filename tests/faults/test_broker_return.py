"""Fault 2b: the broker is away 20 s while 500 nodes are in flight, and a rollout is created meanwhile (its tick
is asked for while no message can be sent). Within 3 s of the broker's return the controller ticks and starts
that rollout's nodes, whatever the number of nodes in flight (docs/operations.md#broker-loss).

Beat is stopped for the test: the tick after the return must not wait for a period (30 s by default; 1 s in
the fault stack), nor for a message sent before or during the outage. It comes from the worker itself, which
asks for one each time it connects to the broker (rollout/tasks.py ``TickOnConnect``), and retries the broker
every second (project/broker.py). The nodes in flight hold one ``rollout/timeouts-due`` message between them
(rollout/controller/timeouts.py), not one per start time.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests.faults.monitor import Monitor
from tests.faults.proof import agents_fleet, hold, pool_id, report
from tests.faults.stack import run_command

pytestmark = pytest.mark.integration

IN_FLIGHT = 500
OUTAGE_SECONDS = 20
STARTED_WITHIN_SECONDS = 3


def test_after_a_20_s_broker_outage_a_tick_asked_meanwhile_starts_nodes_within_3_s(fault_stack):
    stack = fault_stack
    broker = stack.broker
    pool = f"return-{broker.name}"
    out = run_command(
        [sys.executable, "-m", "tests.faults.inflight", f"{pool}-held", str(IN_FLIGHT)],
        env={**os.environ, **stack.env},
    )
    held = json.loads(out.strip().splitlines()[-1])["rollout"]
    pools = {pool: (5, 1.0)}
    fleet = agents_fleet(stack, pools, seed=21)
    stack.kill("beat")  # no period: the first tick after the return is the worker's
    try:
        with Monitor(stack.db_url, pools=pools) as monitor, fleet.start_thread(timeout=120) as running:
            monitor.wait(
                lambda poll: poll.counts.get(held, {}).get("in_flight", 0) == IN_FLIGHT,
                timeout=60,
                what=f"{IN_FLIGHT} nodes in flight",
            )
            assert running.wait_for(lambda f: f.online_count() == 5, timeout=30)
            broker.stop()
            down_at = time.monotonic()
            # Created while the broker is away: the rows are written, its asked tick cannot be sent.
            asked = stack.create(version="1.0.0", poolIds=[pool_id(stack, pool)], waves=[100], soakSeconds=0)
            beats = running.fleet.stats.heartbeats
            hold(
                OUTAGE_SECONDS,
                observed=lambda: running.fleet.stats.heartbeats >= beats + 20,
                what="the agents' heartbeats during the outage",
            )
            assert monitor.last.counts.get(asked, {}).get("in_flight", 0) == 0  # nothing ticked meanwhile
            broker.start()  # empty: nothing queued before or during the outage comes back
            up_at = time.monotonic()
            started_at = monitor.wait(
                lambda poll: (
                    poll.counts.get(asked, {}).get("in_flight", 0) + poll.counts.get(asked, {}).get("succeeded", 0) > 0
                ),
                timeout=60,
                what="the rollout asked during the outage to start nodes",
            )
            report(
                f"broker back with {IN_FLIGHT} nodes in flight ({broker.name})",
                outage_s=up_at - down_at,
                first_start_after_return_s=started_at - up_at,
            )
            assert started_at - up_at <= STARTED_WITHIN_SECONDS, started_at - up_at
            assert monitor.violations == [], monitor.violations[:5]
    finally:
        stack.start_beat()
        # The nodes no agent runs leave the fleet: the pools of the later tests are not theirs.
        stack.client.post(f"/api/compute/rollouts/{held}/abort/", json={})
    assert stack.restarts == []
