"""Fault 2: the broker (a private redis-server killed, or a private RabbitMQ node stopped) goes away during a
rollout and comes back seconds later, empty. Operators and agents keep being answered; the same worker,
beat and web processes carry on (nobody restarts anything) and node starts resume within 15 s of the
broker's return (docs/operations.md#broker-loss)."""

from __future__ import annotations

import time

import pytest

from tests.faults.monitor import Monitor
from tests.faults.proof import agents_fleet, assert_rollout_proof, errors_seen, hold, pool_id, report, server_errors

pytestmark = pytest.mark.integration

# How long the broker stays away at least (RabbitMQ's own start adds several seconds): long enough for the
# worker to have failed a few reconnection attempts.
OUTAGE_SECONDS = 8
RESUMED_WITHIN_SECONDS = 15


def test_a_broker_outage_answers_create_resume_and_heartbeats_and_the_rollouts_complete(fault_stack):
    stack = fault_stack
    broker = stack.broker
    processes = {name: stack.processes[name] for name in ("web", "worker", "beat")}
    pools = {"broker-a": (10, 0.5), "broker-b": (10, 0.5)}
    fleet = agents_fleet(stack, pools, seed=12)
    options = {"waves": [10, 100], "soakSeconds": 1, "upgradeTimeoutSeconds": 60, "maxFailureRatio": 0.1}
    with Monitor(stack.db_url, pools=pools) as monitor, fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=30)
        first = stack.create(version="1.0.0", poolIds=[pool_id(stack, "broker-a")], **options)
        monitor.wait(
            lambda poll: poll.counts.get(first, {}).get("succeeded", 0) >= 2,
            timeout=90,
            what="the first rollout's last wave to be under way",
        )

        broker.stop()
        down_at = time.monotonic()
        beats = running.fleet.stats.heartbeats
        started = monitor.last.started
        # Operators are answered: the rows are written, publishing after the commit is best-effort.
        t = time.monotonic()
        second = stack.create(version="1.0.0", poolIds=[pool_id(stack, "broker-b")], **options)
        create_s = time.monotonic() - t
        paused = stack.client.post(f"/api/compute/rollouts/{first}/pause/")
        assert paused.status_code == 200, paused.text
        t = time.monotonic()
        resumed = stack.client.post(f"/api/compute/rollouts/{first}/resume/")
        resume_s = time.monotonic() - t
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["state"] == "active"
        # Agents are answered: 20 agents at 0.5 s keep heartbeating through the outage.
        hold(
            OUTAGE_SECONDS,
            observed=lambda: running.fleet.stats.heartbeats >= beats + 100,
            what="heartbeats during the outage",
        )
        started_while_down = monitor.last.started - started
        heartbeats_while_down = running.fleet.stats.heartbeats - beats

        broker.start()  # same port, empty: every queued message is gone
        up_at = time.monotonic()
        progressed = monitor.wait(
            lambda poll: poll.started > started + started_while_down,
            timeout=90,
            what="a node start after the broker came back",
        )
        monitor.wait(
            lambda poll: {poll.rollouts[first], poll.rollouts[second]} == {"completed"},
            timeout=120,
            what="both rollouts to complete",
        )
        report(
            f"broker outage ({broker.name})",
            outage_s=up_at - down_at,
            create_s=create_s,
            resume_s=resume_s,
            heartbeats_while_down=heartbeats_while_down,
            starts_while_down=started_while_down,
            next_start_after_restart_s=progressed - up_at,
            completed_after_restart_s=time.monotonic() - up_at,
            agent_errors=dict(errors_seen(running)),
        )
        # Nobody restarted anything: the very processes of before the outage reconnected on their own.
        assert stack.restarts == []
        assert {name: stack.processes[name] for name in processes} == processes
        assert all(process.poll() is None for process in processes.values())
        assert progressed - up_at <= RESUMED_WITHIN_SECONDS, progressed - up_at
        assert_rollout_proof(stack, monitor, running, [first, second])
        assert server_errors(errors_seen(running)) == {}
    worker_log = (stack.logs / "worker.log").read_text(errors="replace")
    assert "Unrecoverable error" not in worker_log
