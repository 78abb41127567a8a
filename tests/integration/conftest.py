"""A whole running system: the server over real HTTP, a Celery worker and beat on the real broker.

A test runs on Redis; parametrized with ``@pytest.mark.parametrize("broker", BROKERS, indirect=True)`` it runs
on RabbitMQ too (``AMQP_URL``, the machine's RabbitMQ in a vhost of the run's own: make test).
"""

from __future__ import annotations

import io
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings
from kombu import Queue

from demo.processes import celery_beat, celery_worker, stop
from fleet.models import Permission
from fleet.services.iam import api_key_create
from project import celery_app
from rollout.registry.binaries import release_binary_store
from rollout.schedules import periodic_tick_ensure
from tests.databases import database_url
from tests.factories import binary_bytes, manifest, pin, rollout_settings, signed


@dataclass
class Stack:
    url: str
    client: httpx.Client
    logs: Path
    sequences: dict[str, int] = field(default_factory=dict)

    def register(self, version: str, sequence: int, *, keys: tuple[int, ...] = (0,)) -> None:
        """Register a release signed by release ``keys`` over HTTP and upload its binary."""
        response = self.client.post(
            "/api/compute/releases/", content=signed(manifest(version, sequence, archs=("amd64",)), *keys)
        )
        assert response.status_code in (200, 201), response.text
        release_binary_store(version=version, platform="linux-amd64", source=io.BytesIO(binary_bytes(version)))
        self.sequences[version] = sequence

    def enroll(self, pools: dict[str, tuple[int, float]]) -> dict[str, list[tuple[str, str]]]:
        """Create pools and nodes over HTTP: {pool name: [(node name, agent token), ...]}."""
        enrolled: dict[str, list[tuple[str, str]]] = {}
        for name, (count, budget) in pools.items():
            pool = self.client.post("/api/compute/pools/", json={"name": name, "policy": {"disruptionBudget": budget}})
            assert pool.status_code == 201, pool.text
            enrolled[name] = []
            for i in range(count):
                node = self.client.post(
                    "/api/compute/nodes/",
                    json={"name": f"{name}-{i:03d}", "poolId": pool.json()["id"], "arch": "amd64"},
                )
                assert node.status_code == 201, node.text
                enrolled[name].append((node.json()["name"], node.json()["agentToken"]))
        return enrolled


@dataclass
class LiveStack(Stack):
    """A Stack whose controller (a Celery worker and beat) the test starts: ``start_controller``."""

    env: dict[str, str] = field(default_factory=dict)
    queue: str = "celery"
    controller: list[subprocess.Popen] = field(default_factory=list)

    def start_controller(self) -> None:
        """A Celery worker and beat (every 1 s) on the test's private queue, as the README starts them."""
        self.controller.append(
            celery_worker(self.env, queue=self.queue, log_path=self.logs / "worker.log", loglevel="INFO")
        )
        self.controller.append(celery_beat(self.env, log_path=self.logs / "beat.log"))


@pytest.fixture
def broker(request, settings) -> Iterator[str]:
    """The broker URL of an end-to-end test: Redis, or RabbitMQ when the test is parametrized so. The test
    process publishes there too (its Celery connection pools are reset before and after)."""
    name = getattr(request, "param", "redis")
    if name == "redis":
        url = django_settings.CELERY_BROKER_URL
        if not url.startswith("redis://"):
            pytest.fail("the end-to-end tests need Redis: run them with `make test`")
        yield url
        return
    url = os.environ.get("AMQP_URL", "")
    if not url.startswith("amqp://"):
        pytest.fail("the end-to-end tests on RabbitMQ need AMQP_URL (make test sets it and starts RabbitMQ)")
    settings.CELERY_BROKER_URL = url
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_timeout": 0.5}
    previous = _app_broker()
    _app_broker_set(url, {"connect_timeout": 0.5})
    try:
        yield url
    finally:
        _app_broker_set(*previous)


def _app_broker() -> tuple[str, dict]:
    return celery_app.conf.broker_url, celery_app.conf.broker_transport_options


def _app_broker_set(url: str, options: dict) -> None:
    """The Celery app publishes to ``url`` from now on. It read its broker from the settings once (the write and
    read URLs too) and keeps its connection and producer pools: each is set again, or it would go on publishing
    to Redis."""
    conf = celery_app.conf
    conf.broker_url = conf.broker_write_url = conf.broker_read_url = url
    conf.broker_transport_options = options
    celery_app.close()  # drops the connection pool
    celery_app.amqp._producer_pool = None


@pytest.fixture
def stack(bare_stack: LiveStack) -> LiveStack:
    """The server (pytest-django's live server), a Celery worker and beat (every 1 s) on a private queue."""
    bare_stack.start_controller()
    return bare_stack


@pytest.fixture
def bare_stack(live_server, settings, tenant, tmp_path, broker) -> Iterator[LiveStack]:
    """The server, and no controller until the test calls ``start_controller()``."""
    downloads = f"{live_server.url}/api/compute/downloads"
    settings.ROLLOUT = rollout_settings(downloads_url=downloads, every=1)
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.FLEET_HEARTBEAT_SECONDS = 10
    # The simulated agents beat every 0.5 s (20 per heartbeatSeconds), not every 10 s as real ones.
    settings.AGENT_TOKEN_RATE = "40/heartbeat"
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    previous_queue = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = queue
    periodic_tick_ensure(every=1, reset=True)
    env = {
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "ROLLOUT_RELEASE_PINS": pin(0),
        "ROLLOUT_DOWNLOADS_URL": downloads,
        "ROLLOUT_EVERY": "1",
        "FLEET_HEARTBEAT_SECONDS": "10",
        "FLEET_MIN_PROTOCOL_VERSION": "2",
        "LOG_LEVEL": "WARNING",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    _, key = api_key_create(tenant=tenant, username="e2e", grants=[Permission.FLEET_ADMIN])
    client = httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    running = LiveStack(url=live_server.url, client=client, logs=logs, env=env, queue=queue)
    try:
        yield running
    finally:
        client.close()
        stop(*running.controller)
        if broker.startswith("amqp://"):  # RabbitMQ keeps a durable queue: the test's goes with it
            with celery_app.connection_for_write() as conn:
                Queue(queue, channel=conn.default_channel).delete()
        celery_app.conf.task_default_queue = previous_queue
        for log in sorted(logs.iterdir()):
            text = log.read_text(errors="replace")[-4000:]
            if "Traceback" in text or "ERROR" in text:
                print(f"--- {log.name} ---\n{text}")
