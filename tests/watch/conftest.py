"""A real web tier (gunicorn + uvicorn worker serving project.asgi, as production runs it) on the test database,
and agents holding session requests against it."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from demo.processes import free_port, stop, wait_until, web_server
from fleet.models import Node, NodeSession
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.databases import database_url
from tests.factories import manifest, release_stored, rollout_settings
from tests.metrics import metric_sample

SESSION = "/api/compute/agent/session"
HEARTBEAT_SECONDS = 1  # the server's and the tests': a node is offline after 3 s unheard
RECONNECT_SECONDS = 3  # how long a web process stays unsubscribed after losing its LISTEN connection
PING_SECONDS = 2  # a LISTEN connection that stops answering is found out within twice this
THREADS = 4
_held_requests = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="held-request")


@dataclass
class Server:
    url: str
    pid: int
    log: Path

    def metric(self, sample: str) -> int:
        """The value of one sample of the server's /metrics (``name`` or ``name{labels}``); 0 when absent."""
        return metric_sample(self.url, sample)

    def held(self) -> int:
        """Requests held now (the server's gauge)."""
        return self.metric("fleet_watch_held")

    def wait_held(self, count: int, timeout: float = 30) -> None:
        wait_until(lambda: self.held() == count, timeout=timeout, poll=0.1, what=f"{count} held requests")


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, heartbeat_seconds=HEARTBEAT_SECONDS)


def serve(tmp_path_factory, *, heartbeat_seconds: int, **settings: str) -> Iterator[Server]:
    """The web tier on the test database, one process, its heartbeat interval ``heartbeat_seconds``; ``settings``
    are more of its environment."""
    port = free_port()
    logs = tmp_path_factory.mktemp("watch")
    env = web_env(logs, heartbeat_seconds=heartbeat_seconds, **settings)
    process = web_server(env, port=port, workers=1, threads=THREADS, log_path=logs / "web.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answering(url), timeout=60, what="the web tier")
        yield Server(url=url, pid=process.pid, log=logs / "web.log")
    finally:
        stop(process)
        text = (logs / "web.log").read_text(errors="replace")
        if "Traceback" in text:
            print(f"--- web.log ---\n{text[-4000:]}")


def web_env(logs: Path, *, heartbeat_seconds: int, **settings: str) -> dict[str, str]:
    """The web tier's environment: the test database, ``heartbeat_seconds``, ``settings``."""
    return {
        "DATABASE_URL": database_url(),
        "DATABASE_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CELERY_TASK_DEFAULT_QUEUE": f"watch-{uuid.uuid4().hex[:8]}",
        "FLEET_HEARTBEAT_SECONDS": str(heartbeat_seconds),
        "FLEET_WATCH_RECONNECT_SECONDS": str(RECONNECT_SECONDS),
        "FLEET_WATCH_PING_SECONDS": str(PING_SECONDS),
        "METRICS_PUBLIC": "1",
        "LOG_LEVEL": "WARNING",
        "ROLLOUT_RUN_DIR": str(logs / "run"),
        **settings,
    }


def answering(url: str) -> bool:
    """Whether the web tier at ``url`` answers (the API's 401 without a key)."""
    try:
        return httpx.get(f"{url}/api/compute/pools/", timeout=2).status_code == 401
    except httpx.HTTPError:
        return False


@pytest.fixture
def heartbeat_seconds(settings):
    settings.FLEET_HEARTBEAT_SECONDS = HEARTBEAT_SECONDS
    return HEARTBEAT_SECONDS


@dataclass
class Agent:
    """One agent over real HTTP: ``session()`` answers, ``watch()`` holds in a thread."""

    url: str
    node: Node
    token: str
    version: str = "0.9.0"
    protocol: int = 3

    def body(self, **extra) -> dict:
        return {"daemonVersion": self.version, "protocolVersion": self.protocol, **extra}

    def session(self, **extra) -> httpx.Response:
        return httpx.post(
            self.url + SESSION, json=self.body(**extra), headers={"Authorization": f"Bearer {self.token}"}, timeout=90
        )

    def watch(self, seen: str, wait: int) -> concurrent.futures.Future:
        """A held request sent from a thread: the future gives (answer, monotonic time it arrived)."""

        def held() -> tuple[httpx.Response, float]:
            response = self.session(wait=wait, seen=seen)
            return response, time.monotonic()

        return _held_requests.submit(held)


@pytest.fixture
def agents(server, tenant, heartbeat_seconds):
    """make(n) -> n agents of nodes in one pool (budget 1), each joined on 0.9.0 over HTTP."""
    pool = pool_create(tenant=tenant, name=f"watch-{uuid.uuid4().hex[:6]}", disruption_budget="1")

    def make(count: int = 1, *, protocol: int = 3) -> list[Agent]:
        made = []
        for _ in range(count):
            node, token = node_create(tenant=tenant, name=f"n-{uuid.uuid4().hex[:8]}", pool_id=pool.id, arch="amd64")
            agent = Agent(url=server.url, node=node, token=token, protocol=protocol)
            assert agent.session().status_code == 200
            made.append(agent)
        return made

    make.pool = pool  # type: ignore[attr-defined]
    return make


def listener_pids() -> list[int]:
    """The web processes' LISTEN connections to the test database."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'rollout-watch' AND datname = %s",
            [connection.settings_dict["NAME"]],
        ).fetchall()
    return [pid for (pid,) in rows]


@pytest.fixture
def releases(settings, db, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    release_stored(manifest("0.9.0", 1))
    release_stored(manifest("1.0.0", 2))


def start(agent, **options):
    """A rollout of 1.0.0 over every node (the agent's): its ticks start it."""
    return rollout_create(
        tenant=agent.node.tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0, **options)
    )


def bulk_agents(tenant, count: int) -> list[str]:
    """``count`` nodes of a new pool, each with an open session on 0.9.0 (protocol 3): their agent tokens."""
    from fleet.tokens import new_token, token_hash

    pool = pool_create(tenant=tenant, name=f"bulk-{uuid.uuid4().hex[:6]}", disruption_budget="1")
    tokens = [new_token("at") for _ in range(count)]
    nodes = Node.objects.bulk_create(
        Node(tenant=tenant, pool=pool, name=f"{pool.name}-{i:05d}", arch="amd64", agent_token_hash=token_hash(token))
        for i, token in enumerate(tokens)
    )
    now = timezone.now() - timedelta(seconds=1)
    NodeSession.objects.bulk_create(
        NodeSession(node=node, daemon_version="0.9.0", protocol_version=3, joined_at=now, last_seen_at=now)
        for node in nodes
    )
    return tokens
