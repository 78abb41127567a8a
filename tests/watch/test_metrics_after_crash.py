"""``fleet_watch_held`` after a kill -9 of the whole web tier (docs/operations.md#metrics): watching agents held by
`make web`'s two gunicorn workers (their gauges summed through ``PROMETHEUS_MULTIPROC_DIR``), the launcher and
every process under it killed with SIGKILL, `make web` started again: once the agents hold their requests
again, ``/metrics`` counts each of them once, not also the dead workers' count.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from demo.processes import free_port, wait_until
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from simulator import AgentConfig, Fleet
from tests.delivery.conftest import world_readable_dir
from tests.delivery.test_make_web import alive, descendants
from tests.metrics import metric_sample
from tests.watch.conftest import Agent, web_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
AGENTS = 12


def held(url: str) -> int | None:
    try:
        return metric_sample(url, "fleet_watch_held")
    except (httpx.HTTPError, ValueError):
        return None


def test_after_kill_9_of_the_whole_tier_fleet_watch_held_counts_the_agents_held(tenant, heartbeat_seconds):
    run_dir = world_readable_dir("rollout-held-crash-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        **web_env(run_dir, heartbeat_seconds=heartbeat_seconds),
        "ROLLOUT_RUN_DIR": str(run_dir / "run"),
        "WEB_WORKERS": "2",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # make web's own: $ROLLOUT_RUN_DIR/prometheus
    launch = [sys.executable, "-m", "demo.web", "--no-migrate", "--port", str(port)]
    log = run_dir / "make-web.log"

    def start() -> subprocess.Popen:
        with log.open("ab") as out:
            return subprocess.Popen(launch, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    tiers = [start()]
    try:
        wait_until(lambda: held(url) is not None, timeout=120, what="make web's /metrics")
        pool = pool_create(tenant=tenant, name=f"crash-{uuid.uuid4().hex[:6]}", disruption_budget="1")
        configs = []
        for _ in range(AGENTS):
            node, token = node_create(tenant=tenant, name=f"n-{uuid.uuid4().hex[:8]}", pool_id=pool.id, arch="amd64")
            assert Agent(url=url, node=node, token=token).session().status_code == 200
            configs.append(AgentConfig(token=token, name=node.name, daemon_version="0.9.0"))
        fleet = Fleet(url, configs, heartbeat_seconds=20, start_spread=0.5, watch=True)
        with fleet.start_thread(timeout=240):
            wait_until(lambda: held(url) == AGENTS, timeout=60, what=f"{AGENTS} held requests")

            kill = {tiers[0].pid, *descendants(tiers[0].pid)}
            for pid in kill:  # kill -9 of the whole tier: no hook runs anywhere
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            tiers[0].wait(timeout=10)
            wait_until(lambda: not any(alive(pid) for pid in kill), timeout=30, what="the killed processes to be gone")
            prometheus = run_dir / "run" / "prometheus"
            assert any(path.name.startswith("gauge_livesum_") for path in prometheus.iterdir())

            tiers.append(start())
            seen: list[int | None] = []

            def held_again() -> bool:
                seen.append(held(url))
                return seen[-1] == AGENTS

            try:
                wait_until(held_again, timeout=180, poll=1, what=f"{AGENTS} held requests after the restart")
            except TimeoutError as exc:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"fleet_watch_held after the restart: {seen}; make web's log:\n{tail}") from exc
            samples = [held(url) for _ in range(10)]
            assert all(sample is not None and sample <= AGENTS for sample in samples), samples
    finally:
        for tier in tiers:
            if tier.poll() is None:
                tier.send_signal(signal.SIGTERM)
                tier.wait(timeout=60)
        text = log.read_text(errors="replace") if log.exists() else ""
        shutil.rmtree(run_dir, ignore_errors=True)
    assert "Traceback" not in text, text[-3000:]
