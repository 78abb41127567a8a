"""The load rule on the `make web` tier: downloads by more clients than Django has threads leave heartbeats on time.

36 slow clients (1 MiB/s each, as agents on ordinary links; 3 web processes x 4 threads = 12 threads for
Django's views) download a binary through nginx while 40 simulated agents heartbeat every second: every
agent heartbeats twice while the downloads run and none fails, every download completes with the right bytes,
and no download held the application server for more than a moment (nginx's account of each request's upstream
time: X-Accel-Redirect, a fraction of the transfer's). How fast the heartbeats stay meanwhile (their p99, their
rate against a calm window) is measured, not asserted: `python -m benchmarks delivery` (docs/benchmarks.md).

Scaled down from the rule's 24 MiB to 8 MiB (the transfers last 8 s) to finish in well under a
minute; the property is the same: with no offload, each download holds one of Django's threads for
its transfer (past the few MiB the buffers between hold), and nginx's upstream time is the transfer's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.processes import wait_until
from fleet.models import Node
from fleet.services.pools import pool_create
from fleet.tokens import new_token, token_hash
from simulator import AgentConfig, Fleet
from tests.delivery.conftest import ACCESS_LOG, store_release, upstream_seconds

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
CLIENTS, BINARY_MIB, RATE = 36, 8, 1 << 20
AGENTS, INTERVAL = 40, 1.0


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
        request_timeout=10,
    )

    def beats() -> list[int]:
        return [agent.heartbeats for agent in fleet.agents]

    access_log = web_tier.log_dir / ACCESS_LOG
    logged = access_log.stat().st_size if access_log.exists() else 0
    with fleet.start_thread(timeout=120) as running:
        assert running.wait_for(lambda f: f.stats.joins == AGENTS, timeout=30)
        clients = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.delivery_clients", web_tier.url + binary.path, binary.sha256,
             str(CLIENTS), str(RATE)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert json.loads(clients.stdout.readline()) == {"started": CLIENTS}
            during = beats()
            # With each download holding one of Django's threads, the heartbeats would wait for the transfers.
            wait_until(lambda: all(now >= then + 2 for now, then in zip(beats(), during, strict=True)),
                       timeout=20, what="every agent to heartbeat twice during the downloads")  # fmt: skip
            assert clients.poll() is None, "the downloads ended before every agent had heartbeated twice"
            finished = json.loads(clients.stdout.readline())
        finally:
            clients.kill() if clients.poll() is None else None
            clients.wait()
    wait_until(lambda: fleet.finished.is_set(), timeout=10, what="the fleet to stop")
    assert finished["done"] == [[binary.sha256, BINARY_MIB << 20]] * CLIENTS
    assert finished["errors"] == 0
    assert fleet.stats.errors == 0, fleet.stats.errors_by_kind
    with access_log.open() as log:
        log.seek(logged)
        held = [seconds for path, seconds in map(upstream_seconds, log) if path == binary.path]
    assert len(held) == CLIENTS
    assert None not in held, "a download answered by nginx alone, not handed over by Django"
    # Handed over, not streamed: each transfer takes BINARY_MIB seconds at RATE; Django holds a request for far less
    # (a moment when the machine is idle; its time, under load, is the benchmarks' to measure).
    transfer = (BINARY_MIB << 20) / RATE
    assert max(held) < transfer / 4, f"a download held the application server {max(held):.3f} s of {transfer:.0f} s"
