"""Fault 3: the database (a private PostgreSQL cluster) stops during heartbeats and ticks, for longer than
the online window (3 x heartbeatSeconds), then starts again."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from tests.faults.monitor import Monitor
from tests.faults.proof import (
    agents_fleet,
    answers_seen,
    assert_rollout_proof,
    create_two_wave_rollout,
    errors_seen,
    hold,
    report,
    server_errors,
    wait_last_wave,
)
from tests.faults.stack import HEARTBEAT_SECONDS

pytestmark = pytest.mark.integration


def test_a_database_outage_answers_503_at_worst_and_skips_no_healthy_node(fault_stack):
    stack = fault_stack
    pools = {"db-a": (10, 0.5), "db-b": (10, 0.5)}
    fleet = agents_fleet(stack, pools, seed=13)
    with Monitor(stack.db_url, pools=pools) as monitor, fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=30)
        rollout = create_two_wave_rollout(stack, pools)
        wait_last_wave(monitor, rollout, succeeded=4)

        before = errors_seen(running)
        answered_before = answers_seen(running)

        def outage_seen() -> int:
            # A failed call is an error; a 503 with Retry-After (database_unavailable) is waited out and sent
            # again by the agent's retry rule (simulator/retry.py), so it is counted among the answers instead.
            refused = answers_seen(running)[503] - answered_before[503]
            return sum(errors_seen(running).values()) - sum(before.values()) + refused

        stack.postgres.stop("fast")  # terminates every session: web, worker, beat, the monitor
        down_at = time.monotonic()
        # An operator's read while the database is down: what does a client see?
        operator: Counter = Counter()
        try:
            operator[stack.client.get(f"/api/compute/rollouts/{rollout}/").status_code] += 1
        except httpx.HTTPError as exc:
            operator[type(exc).__name__] += 1
        # Longer than the online window: every agent's last heartbeat is stale when the database returns.
        hold(
            3 * HEARTBEAT_SECONDS + 2,
            observed=lambda: outage_seen() >= 20,
            what="agents to see the outage",
        )
        stack.postgres.start()
        up_at = time.monotonic()
        beats = running.fleet.stats.heartbeats
        running.wait_for(lambda f: f.stats.heartbeats >= beats + 20, timeout=60)
        answered_at = time.monotonic()
        during = errors_seen(running)
        answered_during = answers_seen(running)
        started = monitor.last.started
        progressed = monitor.wait(
            lambda poll: poll.started > started or poll.rollouts[rollout] == "completed",
            timeout=90,
            what="a node start after the database came back",
        )
        monitor.wait(lambda poll: poll.rollouts[rollout] == "completed", timeout=120, what="the rollout to complete")
        after = errors_seen(running)
        seen = during - before
        report(
            "database outage",
            outage_s=up_at - down_at,
            agents_answered_after_restart_s=answered_at - up_at,
            next_start_after_restart_s=progressed - up_at,
            completed_after_restart_s=time.monotonic() - up_at,
            agent_errors_during_outage=dict(seen),
            agent_answers_during_outage=dict(answered_during - answered_before),
            operator_read_during_outage=dict(operator),
            monitor_failed_polls=monitor.failed_polls,
        )
        assert all(stack.processes[name].poll() is None for name in ("web", "worker", "beat"))
        # While it is down, a client sees 503 (or no connection); never a 500, and nothing 5xx outside the outage.
        assert all(kind.endswith("_503") for kind in server_errors(seen)), seen
        assert all(status in (503, "ConnectError", "ReadTimeout") for status in operator), operator
        assert server_errors(before) == {}
        assert server_errors(after - during) == {}
        # The answers the agents waited out (503 with Retry-After) are 503 at worst too.
        waited = answered_during - answered_before
        assert all(status < 500 or status == 503 for status in waited), waited
        # No node whose agent kept running is skipped as offline (every node succeeded, once):
        # docs/controller.md#liveness-against-the-fleet.
        assert_rollout_proof(stack, monitor, running, [rollout])
