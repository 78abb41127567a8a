"""Faults staged for real (issue 9): every test runs its own PostgreSQL cluster and broker (never the
machine's shared ones, which the tests stop and restart), gunicorn, Celery worker(s) and beat(s) from
demo/processes.py, and simulated agents, then breaks one of them during a live rollout. Every test runs
on both brokers: a private redis-server and a private RabbitMQ node (tests/brokers.py); the worker is
started exactly as docker-compose.yml starts it.

The test process's Django stays bound to pytest-django's database; the private database is seeded by
a child process (tests/faults/seed.py) and watched with plain SQL by a ``Monitor`` thread that polls
it (and survives its outages) while the rollout runs: it checks the disruption budget at every poll.

The private services and the stack are tests/faults/stack.py, the database watch tests/faults/monitor.py,
what the scenarios share and prove tests/faults/proof.py; this module holds the fixtures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from demo.processes import stop, wait_until
from tests.brokers import BROKERS, PrivateRabbitMQ, PrivateRedis, private_broker
from tests.factories import binary_bytes, manifest, pin, signed
from tests.faults.stack import (
    CORE,
    HEARTBEAT_SECONDS,
    PG_BIN,
    RELEASES,
    FaultStack,
    PrivatePostgres,
    RestartPolicy,
    free_port,
    run_command,
)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """One private cluster for the session (initdb, then pg_ctl start on a free port)."""
    with private_cluster() as cluster:
        yield cluster


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL cluster, started, stopped and removed at the end (tests/ctl uses it too)."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"the fault tests need PostgreSQL's initdb/pg_ctl in {PG_BIN} (make test)")
    # A short path: the socket's path must stay under 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="faults-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres")
    cluster = PrivatePostgres(root)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", params=BROKERS)
def fault_broker(request, tmp_path_factory) -> Iterator[PrivateRedis | PrivateRabbitMQ]:
    """The private broker of one run of the fault tests: each test runs once per broker."""
    broker = private_broker(request.param, tmp_path_factory.mktemp(f"faults-{request.param}"))
    try:
        broker.start()
    except RuntimeError as exc:  # not installed: a failure, never a skip
        pytest.fail(str(exc))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def shared_fault_stack(private_postgres, fault_broker, tmp_path_factory) -> Iterator[FaultStack]:
    """One private system per broker for every fault test (starting it costs tens of seconds on a busy
    machine)."""
    with fault_system(private_postgres, fault_broker, tmp_path_factory.mktemp("faults-stack")) as stack:
        yield stack


@contextlib.contextmanager
def fault_system(
    private_postgres: PrivatePostgres, fault_broker: PrivateRedis | PrivateRabbitMQ, root: Path
) -> Iterator[FaultStack]:
    """A private system: a database copied from the template, releases 0.9.0 and 1.0.0 with binaries, gunicorn,
    one worker and one beat (every 1 s) on the private broker. Each test enrolls its own pools. Every process
    is killed at the end, whatever happened (tests/ctl uses it too)."""
    name = f"faults_{fault_broker.name}_{uuid.uuid4().hex[:8]}"
    private_postgres.create_database(name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    logs = root / "logs"
    logs.mkdir()
    env = {
        "DATABASE_URL": private_postgres.url(name),
        "CELERY_BROKER_URL": fault_broker.url,
        "CELERY_TASK_DEFAULT_QUEUE": "faults",
        "ROLLOUT_RELEASE_PINS": pin(0),
        "ROLLOUT_DOWNLOADS_URL": f"{url}/api/compute/downloads",
        "ROLLOUT_EVERY": "1",
        "ROLLOUT_MEDIA_ROOT": str(root / "media"),
        "ROLLOUT_RUN_DIR": str(root / "run"),
        "FLEET_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        # The simulated agents beat every 0.5 s (4 per heartbeatSeconds); the limit is enforced all the same.
        "AGENT_TOKEN_RATE": "10/heartbeat",
        "FLEET_MIN_PROTOCOL_VERSION": "2",
        "DATABASE_CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "TEST_DATABASE_NAME": "",
    }
    stack = FaultStack(
        url=url,
        client=httpx.Client(base_url=url, timeout=30),
        logs=logs,
        sequences=dict(RELEASES),
        env=env,
        db_url=private_postgres.url(name),
        broker=fault_broker,
        postgres=private_postgres,
    )
    try:
        # Worker and web start while the database is migrated and seeded: their start-up is the slow part.
        stack.start_worker(ready=False)
        stack.start_web(ready=False)
        seed: dict[str, list] = {"releases": []}
        for version, sequence in RELEASES:
            envelope = root / f"{version}.json"
            envelope.write_bytes(signed(manifest(version, sequence, archs=("amd64",))))
            binary = root / f"bcd-{version}"
            binary.write_bytes(binary_bytes(version))
            seed["releases"].append({"envelope": str(envelope), "binaries": {"linux-amd64": str(binary)}})
        (root / "seed.json").write_text(json.dumps(seed))
        out = run_command(
            [sys.executable, "-m", "tests.faults.seed", str(root / "seed.json")], env={**os.environ, **env}
        )
        stack.client.headers["Authorization"] = f"Bearer {json.loads(out.strip().splitlines()[-1])['key']}"
        stack.start_beat()  # its scheduler reads the migrated tables at once
        wait_until(stack.web_ready, timeout=90, what="gunicorn to answer")
        stack.wait_worker_ready("worker")
        yield stack
    finally:
        stack.client.close()
        stop(*stack.processes.values(), timeout=3)
        for log in sorted(logs.iterdir()):
            text = log.read_text(errors="replace")[-3000:]
            if "Traceback" in text or "ERROR" in text:
                print(f"--- {log.name} (tail) ---\n{text}")


@pytest.fixture
def fault_stack(shared_fault_stack) -> Iterator[FaultStack]:
    """The shared system, as a test expects it: its services up, web, one worker and one beat running."""
    stack = shared_fault_stack
    stack.restarts.clear()
    if not stack.broker.running():  # type: ignore[union-attr]
        stack.broker.start()  # type: ignore[union-attr]
    if not stack.postgres.running():  # type: ignore[union-attr]
        stack.postgres.start()  # type: ignore[union-attr]
    for name in CORE:
        process = stack.processes.get(name)
        if process is None or process.poll() is not None:
            print(f"[faults] {name} was not running after the previous test: restarted")
            {"web": stack.start_web, "worker": stack.start_worker, "beat": stack.start_beat}[name]()
    policy = RestartPolicy(stack)
    policy.start()
    try:
        yield stack
    finally:
        policy.stop()
    # Extra processes a test started (a second beat, a second worker) end with it.
    extra = [name for name in stack.processes if name not in CORE]
    stop(*(stack.processes.pop(name) for name in extra), timeout=3)
