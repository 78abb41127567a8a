"""The load rule on the `make web` tier: downloads by more clients than Django has threads leave heartbeats on time.

36 slow clients (1 MiB/s each, as agents on ordinary links; 3 web processes x 4 threads = 12 threads for
Django's views) download a binary through nginx while 40 simulated agents heartbeat every second: their
heartbeats keep a p99 under 1 s and at least half the throughput they had before the downloads,
every download completes with the right bytes, and no download held the application server for more
than a moment (nginx's account of each request's upstream time: X-Accel-Redirect, not the transfer).

Scaled down from the rule's 24 MiB to 8 MiB (the transfers last 8 s) to finish in well under a
minute; the property is the same: with no offload, each download holds one of Django's threads for
its transfer (past the few MiB the buffers between hold), and nginx's upstream time is the transfer's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.heartbeat_probes import percentile
from demo.processes import wait_until
from fleet.models import Node
from fleet.services.pools import pool_create
from fleet.tokens import new_token, token_hash
from simulator import AgentConfig, Fleet
from tests.delivery.conftest import ACCESS_LOG, store_release, upstream_seconds

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
CLIENTS, BINARY_MIB, RATE = 36, 8, 1 << 20
AGENTS, INTERVAL, WINDOW = 40, 1.0, 3.0


def test_downloads_through_nginx_leave_heartbeats_on_time(web_tier, delivery_settings, tenant):
    binary = store_release("1.0.0", os.urandom(BINARY_MIB << 20))
    pool = pool_create(tenant=tenant, name="load")
    tokens = [new_token("at") for _ in range(AGENTS)]
    Node.objects.bulk_create(
        Node(
            tenant=tenant, pool=pool, name=f"n-{i}", arch="amd64", spec={"daemon": None}, agent_token_hash=token_hash(t)
        )
        for i, t in enumerate(tokens)
    )
    fleet = Fleet(
        web_tier.url,
        [AgentConfig(token=token, name=f"n-{i}") for i, token in enumerate(tokens)],
        heartbeat_seconds=INTERVAL,
        record_latencies=True,
        request_timeout=10,
    )

    def window() -> tuple[float, list[float]]:
        """Heartbeats/s and their latencies over WINDOW seconds from now."""
        beats, seen = fleet.stats.heartbeats, len(fleet.stats.latencies)
        time.sleep(WINDOW)  # a measuring window, not a wait for a condition
        return (fleet.stats.heartbeats - beats) / WINDOW, fleet.stats.latencies[seen:]

    access_log = web_tier.log_dir / ACCESS_LOG
    logged = access_log.stat().st_size if access_log.exists() else 0
    with fleet.start_thread(timeout=120) as running:
        assert running.wait_for(lambda f: f.stats.joins == AGENTS, timeout=30)
        calm_rate, calm = window()
        clients = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.delivery_clients", web_tier.url + binary.path, binary.sha256,
             str(CLIENTS), str(RATE)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert json.loads(clients.stdout.readline()) == {"started": CLIENTS}
            busy_rate, busy = window()
            finished = json.loads(clients.stdout.readline())
        finally:
            clients.kill() if clients.poll() is None else None
            clients.wait()
    wait_until(lambda: fleet.finished.is_set(), timeout=10, what="the fleet to stop")
    report = (
        f"calm {calm_rate:.0f} hb/s p99 {percentile(calm, 0.99):.3f} s; during downloads {busy_rate:.0f} hb/s"
        f" p99 {percentile(busy, 0.99):.3f} s; downloads took {finished['seconds']:.1f} s"
    )
    print(report)
    assert finished["done"] == [[binary.sha256, BINARY_MIB << 20]] * CLIENTS
    assert finished["errors"] == 0
    assert finished["seconds"] > WINDOW  # the window fell inside the transfers
    assert percentile(busy, 0.99) < 1.0, report
    assert busy_rate >= calm_rate / 2, report
    assert fleet.stats.errors == 0, fleet.stats.errors_by_kind
    with access_log.open() as log:
        log.seek(logged)
        held = [seconds for path, seconds in map(upstream_seconds, log) if path == binary.path]
    assert len(held) == CLIENTS
    assert None not in held, "a download answered by nginx alone, not handed over by Django"
    assert max(held) < 1.0, f"a download held the application server {max(held):.3f} s"
