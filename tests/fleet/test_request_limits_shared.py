"""Two real web processes (gunicorn each) count one API key's requests together in a shared Redis (CACHE_URL):
what one process let through counts against the key in the other (docs/operations.md#request-limits)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from demo.processes import free_port, stop, wait_until, web_server
from fleet.models import Permission
from fleet.services.iam import api_key_create
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from fleet.tokens import token_hash
from tests.brokers import PrivateRedis
from tests.databases import database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIMIT = 10


@pytest.fixture(scope="module")
def two_web_processes(django_db_setup, tmp_path_factory) -> Iterator[tuple[PrivateRedis, list[httpx.Client]]]:
    """Started once for the module: each test counts against credentials of its own."""
    tmp_path = tmp_path_factory.mktemp("limits")
    store = PrivateRedis(tmp_path)
    store.start()
    env = {
        "DATABASE_URL": database_url(),
        "CACHE_URL": store.url,
        "API_KEY_RATE": f"{LIMIT}/hour",
        "AGENT_TOKEN_RATE": f"{LIMIT}/hour",
        "LOG_LEVEL": "WARNING",
        "ROLLOUT_RUN_DIR": str(tmp_path / "run"),
    }
    ports = [free_port(), free_port()]
    servers = [
        web_server(env, port=port, workers=1, threads=2, log_path=tmp_path / f"web-{port}.log") for port in ports
    ]
    clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) for port in ports]
    try:
        for client in clients:
            wait_until(lambda c=client: _answers(c), timeout=60, what="gunicorn to answer")
        yield store, clients
    finally:
        for client in clients:
            client.close()
        stop(*servers, timeout=5)
        store.stop()


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/api/compute/pools/").status_code == 401
    except httpx.HTTPError:
        return False


def stored_count(store: PrivateRedis, key: str) -> int:
    """The key's requests counted in the shared store (over its windows)."""
    import redis

    client = redis.Redis(port=store.port)
    return sum(int(client.get(bucket) or 0) for bucket in client.scan_iter(f"rl:api_key:{token_hash(key)}:*"))


def test_two_web_processes_count_one_api_key_together(tenant, two_web_processes):
    store, (first, second) = two_web_processes
    _, key = api_key_create(tenant=tenant, username="loop", grants=[Permission.FLEET_ADMIN])
    headers = {"Authorization": f"Bearer {key}"}
    assert [first.get("/api/compute/pools/", headers=headers).status_code for _ in range(6)] == [200] * 6
    wait_until(lambda: stored_count(store, key) == 6, timeout=10, what="the first process's counts in the store")

    answers = []
    while not answers or answers[-1].status_code == 200:
        answers.append(second.get("/api/compute/pools/", headers=headers))
        assert len(answers) <= LIMIT, "the second process ignored what the first one counted"
    # The second process lets through what is left of the limit (4); its first request, before it has heard
    # the store, may be one more.
    assert 4 <= len(answers) - 1 <= 5, [answer.status_code for answer in answers]
    refused = answers[-1]
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert refused.headers["Retry-After"] == str(refused.json()["retryAfter"])
    # The first process learns the total at its next flush: it refuses within one more request.
    again = [first.get("/api/compute/pools/", headers=headers).status_code for _ in range(2)]
    assert again[-1] == 429, again


def test_the_async_session_front_counts_each_agent_request_once(tenant, two_web_processes):
    """The web tier answers agent sessions in async code (fleet/watch/front.py: joins, heartbeats, leaves) and hands
    the rest to Django (a refusal): either way a request counts once against its agent token, and the 429 is the
    API's, for a leave too."""
    _, (web, _) = two_web_processes
    pool = pool_create(tenant=tenant, name="limited")
    _, token = node_create(tenant=tenant, name="n-1", pool_id=pool.id, arch="amd64")
    headers = {"Authorization": f"Bearer {token}"}
    body = {"daemonVersion": "1.0.0", "protocolVersion": 3}
    refusal = {**body, "refused": {"version": "9.9.9", "code": "bad_signature", "detail": "not ours"}}
    calls = [
        lambda: web.post("/api/compute/agent/session", json=body, headers=headers),  # a join (the front)
        lambda: web.post("/api/compute/agent/session", json=body, headers=headers),  # a heartbeat (the front)
        lambda: web.post("/api/compute/agent/session", json=refusal, headers=headers),  # Django's serializer
        lambda: web.delete("/api/compute/agent/session", headers=headers),  # a leave (the front)
    ]
    answers = [calls[i % len(calls)]() for i in range(LIMIT)]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 204] * (LIMIT // 4) + [200, 200]
    for refused in (calls[0](), calls[3]()):
        assert refused.status_code == 429
        assert refused.json()["code"] == "throttled"
        assert refused.headers["Retry-After"] == str(refused.json()["retryAfter"])
