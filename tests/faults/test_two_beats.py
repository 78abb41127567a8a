"""Fault 4: two beats at once (a second `celery beat` started by mistake) send every periodic tick twice."""

from __future__ import annotations

import time

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
)

pytestmark = pytest.mark.integration


def test_two_beats_double_the_ticks_and_no_node_starts_twice_nor_beyond_the_budget(fault_stack):
    stack = fault_stack
    log = stack.logs / "worker.log"
    stack.start_beat("beat-2", loglevel="INFO")
    # The second beat takes seconds to start: the window measured below begins once it sends.
    second_beat_log = stack.logs / "beat-2.log"
    wait_until(
        lambda: b"Sending due task" in second_beat_log.read_bytes(), timeout=60, what="the second beat to send a tick"
    )
    pools = {"beats-a": (10, 0.5), "beats-b": (10, 0.5)}
    fleet = agents_fleet(stack, pools, seed=14)
    with Monitor(stack.db_url, pools=pools) as monitor, fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=30)
        began, offset = time.monotonic(), log.stat().st_size
        rollout = create_two_wave_rollout(stack, pools)
        monitor.wait(lambda poll: poll.rollouts.get(rollout) == "completed", timeout=120, what="the rollout")
        elapsed = time.monotonic() - began
        ticks = log.read_bytes()[offset:].count(b"Task rollout/all[")
        report(
            "two beats",
            rollout_total_s=elapsed,
            periodic_ticks_received=ticks,
            ticks_per_s=ticks / elapsed,
            peaks=monitor.peak,
        )
        # Both beats were sending (one beat sends one per second): the duplicate ticks really ran.
        assert ticks > 1.3 * elapsed, (ticks, elapsed)
        assert_rollout_proof(stack, monitor, running, [rollout])
        assert server_errors(errors_seen(running)) == {}
