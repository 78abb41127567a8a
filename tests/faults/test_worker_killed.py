"""Fault 1: the Celery worker is killed (SIGKILL) mid-tick and mid-rollout; a new one takes over."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.faults.conftest import (
    Monitor,
    agents_fleet,
    assert_rollout_proof,
    create_two_wave_rollout,
    errors_seen,
    report,
    server_errors,
    wait_last_wave,
)

pytestmark = pytest.mark.integration

BUSY_WORKER_SQL = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'faults-worker' AND state <> 'idle'"


def kill_mid_transaction(stack, *, within: float = 8.0) -> bool:
    """SIGKILL the worker while it holds an open transaction (a tick or a task), polled in pg_stat_activity;
    kill it anyway after ``within`` seconds. True when it was caught mid-transaction."""
    caught = False
    deadline = time.monotonic() + within
    with psycopg.connect(stack.db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(BUSY_WORKER_SQL).fetchone()[0]:
                caught = True
                break
            time.sleep(0.002)  # a busy-poll's pace, not a synchronisation
    stack.kill("worker")
    return caught


def test_a_worker_killed_mid_tick_and_mid_rollout_is_replaced_and_the_rollout_completes(fault_stack):
    stack = fault_stack
    pools = {"kill-a": (10, 0.5), "kill-b": (10, 0.5)}
    fleet = agents_fleet(stack, pools, seed=11)
    with Monitor(stack.db_url, pools=pools) as monitor, fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=30)
        began = time.monotonic()
        rollout = create_two_wave_rollout(stack, pools)
        # Mid-rollout: the last wave under way, with nodes still pending. Mid-tick: see kill_mid_transaction.
        wait_last_wave(monitor, rollout, succeeded=5)
        caught = kill_mid_transaction(stack)
        killed_at = time.monotonic()
        started = monitor.last.started
        stack.start_worker()  # a fresh process: the killed one's unacked message stays in Redis
        ready = time.monotonic() - killed_at
        progressed = monitor.wait(
            lambda poll: poll.started > started or poll.rollouts[rollout] == "completed",
            timeout=90,
            what="a node start after the new worker came up",
        )
        monitor.wait(lambda poll: poll.rollouts[rollout] == "completed", timeout=120, what="the rollout to complete")
        report(
            "worker SIGKILL mid-rollout",
            mid_transaction=caught,
            new_worker_ready_s=ready,
            next_start_after_kill_s=progressed - killed_at,
            rollout_total_s=time.monotonic() - began,
            peaks=monitor.peak,
        )
        assert_rollout_proof(stack, monitor, running, [rollout])
        assert server_errors(errors_seen(running)) == {}
