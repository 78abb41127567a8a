"""Metrics that survive a crash (docs/operations.md#metrics): `make web` sets ``PROMETHEUS_MULTIPROC_DIR`` and
clears it at start of every file no running process writes, and gunicorn's ``on_starting`` forgets the live
gauges of processes that are gone. A web process holding agents (its ``fleet_watch_held`` file, as a gunicorn
worker writes it) killed with SIGKILL together with the whole tier: after a restart ``fleet_watch_held`` is what
is held now (0), not the dead process's count.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from demo.processes import free_port, stop, wait_until, web_server
from tests.delivery.conftest import database_url, world_readable_dir
from tests.delivery.test_make_web import descendants

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]

#: A web process holding 5 agents' requests, as fleet/watch/hub.py's gauge records them, until it is killed.
HOLDER = """
import time
from prometheus_client import Gauge
Gauge("fleet_watch_held", "held", multiprocess_mode="livesum").set(5)
print("holding", flush=True)
time.sleep(600)
"""


def held(url: str) -> float | None:
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    lines = [line for line in text.splitlines() if line.startswith("fleet_watch_held ")]
    return float(lines[0].split()[1]) if lines else None


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def test_after_kill_9_of_the_whole_tier_fleet_watch_held_is_the_truth():
    run_dir = world_readable_dir("rollout-metrics-crash-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ROLLOUT_RUN_DIR": str(run_dir),
        "METRICS_PUBLIC": "1",
        "LOG_LEVEL": "WARNING",
        "WEB_WORKERS": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # make web's own: $ROLLOUT_RUN_DIR/prometheus
    directory = run_dir / "prometheus"
    launch = [sys.executable, "-m", "demo.web", "--no-migrate", "--port", str(port)]
    tiers: list[subprocess.Popen] = []
    try:
        tiers.append(subprocess.Popen(launch, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_until(lambda: held(url) is not None, timeout=90, what="make web's /metrics")
        assert held(url) == 0
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER],
            env={**env, "PROMETHEUS_MULTIPROC_DIR": str(directory)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        assert held(url) == 5  # summed over the live processes

        kill_all({tiers[0].pid, holder.pid, *descendants(tiers[0].pid)})  # kill -9, no hook runs anywhere
        holder.wait(timeout=10)
        tiers[0].wait(timeout=10)
        assert any(str(holder.pid) in path.name for path in directory.iterdir())  # what the crash left

        tiers.append(subprocess.Popen(launch, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_until(lambda: held(url) is not None, timeout=90, what="make web's /metrics after the restart")
        assert held(url) == 0  # the agents actually held: none
        assert not any(str(holder.pid) in path.name for path in directory.iterdir())
    finally:
        for tier in tiers:
            if tier.poll() is None:
                tier.send_signal(signal.SIGTERM)
                tier.wait(timeout=30)
        shutil.rmtree(run_dir, ignore_errors=True)


def test_gunicorn_alone_forgets_the_live_gauges_of_dead_processes(tmp_path):
    """compose and the systemd units run gunicorn without make web: its master's ``on_starting`` does it."""
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {
        "DATABASE_URL": database_url(),
        "ROLLOUT_RUN_DIR": str(tmp_path / "run"),
        "METRICS_PUBLIC": "1",
        "LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    holder.kill()
    holder.wait(timeout=10)
    port = free_port()
    web = web_server(env, port=port, workers=1, threads=2, log_path=tmp_path / "web.log")
    try:
        wait_until(lambda: held(f"http://127.0.0.1:{port}") is not None, timeout=90, what="gunicorn's /metrics")
        assert held(f"http://127.0.0.1:{port}") == 0
    finally:
        stop(web)
