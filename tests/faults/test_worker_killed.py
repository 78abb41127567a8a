"""Fault 1: the Celery worker is killed (SIGKILL) mid-tick and mid-rollout; a new one takes over."""

from __future__ import annotations

import time

import psycopg
import pytest

from demo.processes import wait_until
from tests.faults.monitor import Monitor
from tests.faults.proof import (
    agents_fleet,
    assert_rollout_proof,
    create_two_wave_rollout,
    errors_seen,
    report,
    server_errors,
    wait_last_wave,
)

pytestmark = pytest.mark.integration

# Backends of the worker inside a transaction and waiting for a lock that connection ``%s`` holds.
WORKER_BLOCKED_SQL = """
    SELECT pid FROM pg_stat_activity
    WHERE application_name = 'faults-worker' AND xact_start IS NOT NULL AND %s = ANY(pg_blocking_pids(pid))
"""
WORKER_BACKENDS_SQL = "SELECT pid FROM pg_stat_activity WHERE application_name = 'faults-worker'"


def kill_mid_transaction(stack, *, pools: list[str], timeout: float = 60.0) -> int:
    """SIGKILL the worker inside a tick's transaction; returns the backend that was in it.

    This connection takes the pools' row locks (as a workflow start does): the worker's next tick
    of the rollout takes the rollout's row lock and then waits for a pool's inside its transaction.
    Once PostgreSQL shows a worker backend in a transaction blocked by this connection, the worker
    is killed; then the locks are released, and the dead worker's backend ends, its transaction
    rolled back.
    """
    with psycopg.connect(stack.db_url, autocommit=True) as watch, psycopg.connect(stack.db_url) as holder:
        holder.execute("SELECT id FROM fleet_pool WHERE name = ANY(%s) ORDER BY id FOR UPDATE", (pools,))
        holder_pid = holder.info.backend_pid
        blocked: list[int] = []

        def worker_blocked() -> bool:
            blocked[:] = [pid for (pid,) in watch.execute(WORKER_BLOCKED_SQL, (holder_pid,)).fetchall()]
            return bool(blocked)

        wait_until(worker_blocked, timeout=timeout, poll=0.02, what="a tick to wait for a pool inside its transaction")
        stack.kill("worker")
        holder.rollback()
        wait_until(
            lambda: not watch.execute(WORKER_BACKENDS_SQL).fetchall(),
            timeout=30,
            what="the killed worker's backends to end",
        )
    return blocked[0]


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
        backend = kill_mid_transaction(stack, pools=list(pools))
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
            killed_in_transaction_of_backend=backend,
            new_worker_ready_s=ready,
            next_start_after_kill_s=progressed - killed_at,
            rollout_total_s=time.monotonic() - began,
            peaks=monitor.peak,
        )
        assert_rollout_proof(stack, monitor, running, [rollout])
        assert server_errors(errors_seen(running)) == {}
