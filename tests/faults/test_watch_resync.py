"""Held agent sessions after the database restarts (docs/fleet.md#watch): a change committed while no web
process listens (PostgreSQL is back, the hub has not yet LISTENed again) reaches the held request as soon as the
hub listens again, not at the end of its ``wait``.

The web tier is `make web`'s (``python -m demo.web``: nginx, with docker/nginx.conf, in front of gunicorn serving
project.asgi, one process of 4 threads), so the held request also crosses nginx's proxy timeouts as the agents'
does. It runs on a database of the private cluster (tests/faults/conftest.py ``private_postgres``, never the
shared one), migrated by tests/faults/seed.py. To commit the change before listening can resume,
deterministically, the cluster first comes back on another port (where the web tier does not look), takes the
change, and only then returns on its own port.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from demo.processes import BASE_DIR, stop, wait_until
from tests.faults.stack import PrivatePostgres, free_port, run_command
from tests.metrics import metric_sample

pytestmark = pytest.mark.integration

SESSION = "/api/compute/agent/session"
WAIT = 45  # the held request's wait: an answer long before it was woken by the resync
ANSWERED_WITHIN_SECONDS = 2


@dataclass
class Tier:
    url: str
    db_name: str
    token: str
    node_id: str

    def session(self, **extra) -> httpx.Response:
        body = {"daemonVersion": "0.9.0", "protocolVersion": 3, **extra}
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.post(self.url + SESSION, json=body, headers=headers, timeout=WAIT + 30)

    def held(self) -> int:
        return metric_sample(self.url, "fleet_watch_held")


@pytest.fixture(scope="module")
def tier(private_postgres: PrivatePostgres) -> Iterator[Tier]:
    """`make web` (nginx in front of one gunicorn process) on a fresh database of the private cluster, one node
    enrolled and joined."""
    root = Path(tempfile.mkdtemp(prefix="rollout-resync-"))
    root.chmod(0o755)  # nginx's workers (nobody, under root) read the media root below it
    name = f"resync_{uuid.uuid4().hex[:8]}"
    private_postgres.create_database(name)
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": private_postgres.url(name),
        "CELERY_BROKER_URL": "filesystem://",
        "ROLLOUT_RUN_DIR": str(root / "run"),
        "ROLLOUT_MEDIA_ROOT": str(root / "media"),
        "FLEET_WATCH_RECONNECT_SECONDS": "1",
        "METRICS_PUBLIC": "1",
        "LOG_LEVEL": "INFO",
        "TEST_DATABASE_NAME": "",
        "WEB_WORKERS": "1",
        "WEB_THREADS": "4",
    }
    (root / "seed.json").write_text(json.dumps({"releases": []}))
    out = run_command([sys.executable, "-m", "tests.faults.seed", str(root / "seed.json")], env=env)
    key = json.loads(out.strip().splitlines()[-1])["key"]
    log = root / "web.log"
    with log.open("ab") as stream:  # the seed migrated: `make web ARGS=--no-migrate`
        process = subprocess.Popen(
            [sys.executable, "-m", "demo.web", "--no-migrate", "--port", str(port)],
            cwd=BASE_DIR,
            env=env,
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

        def answers() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                return client.get("/api/compute/pools/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, timeout=90, what="make web")
        assert client.get("/api/compute/pools/").headers["server"] == "nginx"  # the agents' way in
        pool = client.post("/api/compute/pools/", json={"name": "resync", "policy": {"disruptionBudget": 1}})
        assert pool.status_code == 201, pool.text
        node = client.post("/api/compute/nodes/", json={"name": "n1", "poolId": pool.json()["id"], "arch": "amd64"})
        assert node.status_code == 201, node.text
        yield Tier(url=url, db_name=name, token=node.json()["agentToken"], node_id=node.json()["id"])
    finally:
        stop(process, timeout=30)  # SIGTERM: make web stops nginx and gunicorn, then exits
        text = log.read_text(errors="replace")
        if "Traceback" in text or "[emerg]" in text:
            print(f"--- web.log ---\n{text[-4000:]}")
        shutil.rmtree(root, ignore_errors=True)


def listening(cluster: PrivatePostgres, db_name: str) -> bool:
    try:
        with cluster.connect() as conn:
            rows = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'rollout-watch' AND datname = %s", [db_name]
            ).fetchall()
    except Exception:  # down
        return False
    return bool(rows)


def change_spec(cluster: PrivatePostgres, tier: Tier) -> None:
    """A new ``spec.daemon`` for the node (a new revision each time), written with plain SQL (its trigger
    NOTIFYs whoever listens)."""
    daemon = json.dumps({"version": "1.0.0", "url": f"http://example.invalid/{uuid.uuid4().hex}", "sha256": "0" * 64})
    with cluster.connect(tier.db_name) as conn:
        conn.execute(
            "UPDATE fleet_node SET spec = jsonb_set(spec, '{daemon}', %s::jsonb) WHERE id = %s", [daemon, tier.node_id]
        )


def hold(tier: Tier, pool: concurrent.futures.ThreadPoolExecutor) -> tuple[concurrent.futures.Future, str]:
    first = tier.session()
    assert first.status_code == 200, first.text
    seen = first.json()["specRevision"]

    def held() -> tuple[httpx.Response, float]:
        response = tier.session(wait=WAIT, seen=seen)
        return response, time.monotonic()

    future = pool.submit(held)
    wait_until(lambda: tier.held() == 1, timeout=20, what="the request to be held")
    return future, seen


def test_a_change_committed_before_listening_resumes_answers_the_held_request_within_2_s(private_postgres, tier):
    cluster = private_postgres
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        future, seen = hold(tier, pool)
        wait_until(lambda: listening(cluster, tier.db_name), timeout=20, what="the web process to LISTEN")
        cluster.stop("fast")  # the LISTEN connection is lost; the hub tries again every second
        home = cluster.port
        try:
            cluster.port = free_port()  # back where the web tier does not look: the change is notified to nobody
            cluster.start()
            change_spec(cluster, tier)
            cluster.stop("fast")
        finally:
            cluster.port = home
            cluster.start()
        back_at = time.monotonic()  # listening can resume from now on, not before
        response, answered_at = future.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json()["specRevision"] != seen
    assert response.json()["spec"]["daemon"]["version"] == "1.0.0"
    print(f"answered {answered_at - back_at:.2f} s after PostgreSQL returned")
    assert answered_at - back_at < ANSWERED_WITHIN_SECONDS, answered_at - back_at


def test_a_terminated_listen_session_answers_a_change_made_meanwhile_within_2_s(private_postgres, tier):
    cluster = private_postgres
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        future, seen = hold(tier, pool)
        wait_until(lambda: listening(cluster, tier.db_name), timeout=20, what="the web process to LISTEN")
        with cluster.connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"  # returns once it is gone
                " WHERE application_name = 'rollout-watch' AND datname = %s",
                [tier.db_name],
            )
        change_spec(cluster, tier)
        changed_at = time.monotonic()
        # The hub LISTENs again a second later (FLEET_WATCH_RECONNECT_SECONDS): the change was notified to nobody.
        response, answered_at = future.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json()["specRevision"] != seen
    print(f"answered {answered_at - changed_at:.2f} s after the change")
    assert answered_at - changed_at < ANSWERED_WITHIN_SECONDS, answered_at - changed_at
