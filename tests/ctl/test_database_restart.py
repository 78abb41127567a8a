"""``ctl wait`` across a real PostgreSQL restart (issue 51): it keeps waiting while the API answers 503 (and
while nothing answers), and exits 0 when the rollout completes after the database is back.

The system is tests/faults/'s private one (its own PostgreSQL cluster, broker, gunicorn, Celery worker and beat,
simulated agents): the machine's shared PostgreSQL is never stopped. One broker (Redis) is enough here: the
broker is not what this test breaks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.processes import wait_until
from tests.brokers import PrivateRedis
from tests.faults.conftest import fault_stack, fault_system, private_cluster
from tests.faults.proof import agents_fleet, hold, pool_id
from tests.faults.stack import FaultStack

pytestmark = pytest.mark.integration
REPOSITORY = Path(__file__).resolve().parents[2]
__all__ = ["fault_stack"]  # tests/faults' fixture, on this module's shared_fault_stack


@pytest.fixture(scope="module")
def shared_fault_stack(tmp_path_factory) -> Iterator[FaultStack]:
    """tests/faults' private system, on a private PostgreSQL cluster and a private Redis of this module's own
    (the broker is not what this test breaks): stopped when the module ends, not with the session."""
    broker = PrivateRedis(tmp_path_factory.mktemp("ctl-redis"))
    try:
        broker.start()
    except RuntimeError as exc:  # not installed: a failure, never a skip
        pytest.fail(str(exc))
    try:
        with private_cluster() as cluster, fault_system(cluster, broker, tmp_path_factory.mktemp("ctl-stack")) as stack:
            yield stack
    finally:
        broker.stop()


def test_wait_and_status_watch_ride_out_a_database_restart_and_exit_0_when_the_rollout_completes(fault_stack, tmp_path):
    stack = fault_stack
    pools = {"ctl-db": (4, 0.5)}
    fleet = agents_fleet(stack, pools, seed=51)
    with fleet.start_thread(timeout=240) as running:
        assert running.wait_for(lambda f: f.online_count() == 4, timeout=30)
        # Wave 1 soaks an hour: the rollout cannot complete before the test promotes it, after the restart.
        rollout = stack.create(
            version="1.0.0", poolIds=[pool_id(stack, "ctl-db")], waves=[50, 100], soakSeconds=3600,
            upgradeTimeoutSeconds=60,
        )  # fmt: skip
        env = {**os.environ, "ROLLOUT_SERVER": stack.url, "COLUMNS": "160"}
        env["ROLLOUT_API_KEY"] = stack.client.headers["Authorization"].removeprefix("Bearer ")
        commands = {
            "wait": ["wait", rollout, "--timeout", "600", "--interval", "0.5"],
            "watch": ["--output", "json", "status", rollout, "--watch", "--timeout", "600", "--interval", "0.5"],
        }
        running_ctl: dict[str, subprocess.Popen] = {}
        for name, argv in commands.items():
            with (tmp_path / f"{name}.err").open("w") as err, (tmp_path / f"{name}.out").open("w") as out:
                running_ctl[name] = subprocess.Popen(
                    [sys.executable, "-m", "rollout.ctl", *argv], env=env, cwd=REPOSITORY, stdout=out, stderr=err
                )

        def said(name: str, what: str = "err") -> str:
            return (tmp_path / f"{name}.{what}").read_text()

        try:
            wait_until(lambda: "active" in said("wait", "out"), timeout=60, what="ctl wait's first line")
            wait_until(
                lambda: (
                    stack.query("SELECT next_wave_at FROM rollout_rollout WHERE id = %s", (rollout,))[0][0] is not None
                ),
                timeout=90,
                what="wave 1 to settle and soak",
            )
            stack.postgres.stop("fast")
            try:
                # Longer than the old give-up (4 retries at 2 s, ~8 s), and until both have met the 503.
                hold(
                    15,
                    observed=lambda: all("warning: database_unavailable" in said(name) for name in commands),
                    what="ctl wait and status --watch to meet the outage",
                )
                for name, process in running_ctl.items():
                    assert process.poll() is None, said(name)
            finally:
                stack.postgres.start()
            wait_until(stack.web_ready, timeout=90, what="the API to answer again")
            promoted = stack.client.post(f"/api/compute/rollouts/{rollout}/promote/")
            assert promoted.status_code == 200, promoted.text
            for name, process in running_ctl.items():
                assert process.wait(timeout=180) == 0, said(name)
        finally:
            for process in running_ctl.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()
    for name in commands:
        assert "warning: database_unavailable" in said(name)
        assert "the server answers again" in said(name)
    assert f"{rollout} completed" in said("wait", "out")
    assert json.loads(said("watch", "out"))["state"] == "completed"
