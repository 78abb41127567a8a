"""Held agent sessions through the `make web` tier (nginx with docker/nginx.conf in front of gunicorn's uvicorn
workers, docs/operations.md#the-web-tier): a spec change releases a held request within a second, a request
nothing changes for is answered 200 at its ``wait`` (not cut by nginx), and plain heartbeats are answered
while more requests are held than the tier has threads.

The longest ``wait`` (60 s) is not waited for here: tests/deploy/test_compose.py holds the session location's
``proxy_read_timeout`` above it."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from dataclasses import dataclass

import httpx
import pytest
from django.db import transaction

from demo.processes import wait_until
from fleet.services.nodes import node_create, nodes_set_daemon
from fleet.services.pools import pool_create
from fleet.watch.front import SESSION_PATH
from tests.metrics import metric_sample

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
HELD = 16  # more than the tier's threads for Django's views (3 processes x 4): a request held on one would starve


@dataclass
class Agent:
    url: str
    node_id: uuid.UUID
    token: str

    def session(self, **extra) -> httpx.Response:
        return httpx.post(
            self.url + SESSION_PATH,
            json={"daemonVersion": "0.9.0", "protocolVersion": 3, **extra},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=90,
        )

    def held(self, seen: str, wait: int) -> tuple[httpx.Response, float]:
        """A held request: its answer and the monotonic time it arrived."""
        response = self.session(wait=wait, seen=seen)
        return response, time.monotonic()


def held_now(url: str) -> int:
    """Requests the tier holds now (fleet_watch_held, summed over its processes)."""
    return metric_sample(url, "fleet_watch_held")


@pytest.fixture
def agents(web_tier, tenant):
    """make(n): n nodes, each joined over HTTP through nginx; with the revision each was answered."""
    pool = pool_create(tenant=tenant, name=f"held-{uuid.uuid4().hex[:6]}")

    def make(count: int) -> list[tuple[Agent, str]]:
        made = []
        for _ in range(count):
            node, token = node_create(tenant=tenant, name=f"n-{uuid.uuid4().hex[:8]}", pool_id=pool.id, arch="amd64")
            agent = Agent(url=web_tier.url, node_id=node.id, token=token)
            joined = agent.session()
            assert joined.status_code == 200, joined.text
            made.append((agent, joined.json()["specRevision"]))
        return made

    return make


def test_a_spec_change_releases_a_held_request_through_nginx_within_a_second(web_tier, agents):
    ((agent, seen),) = agents(1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(agent.held, seen, 30)
        wait_until(lambda: held_now(web_tier.url) == 1, timeout=20, what="the request to be held")
        with transaction.atomic():
            nodes_set_daemon(node_ids=[agent.node_id], daemon={"version": "1.0.0"})
            committing = time.monotonic()
        response, arrived = held.result(timeout=40)
    assert response.status_code == 200, response.text
    assert response.headers["server"] == "nginx"
    answer = response.json()
    assert answer["specRevision"] != seen
    assert answer["spec"]["daemon"] == {"version": "1.0.0"}
    assert arrived - committing < 1.0, f"answered {arrived - committing:.3f} s after the commit"


def test_a_held_request_nothing_changes_for_is_answered_200_at_its_wait(web_tier, agents):
    ((agent, seen),) = agents(1)
    sent = time.monotonic()
    response, arrived = agent.held(seen, 3)
    assert response.status_code == 200, response.text  # nginx neither cut it (504) nor answered for gunicorn
    assert response.json()["specRevision"] == seen
    assert 3.0 <= arrived - sent < 6.0


def test_plain_heartbeats_are_answered_while_more_requests_are_held_than_there_are_threads(web_tier, agents):
    made = agents(HELD + 1)
    (plain, _), holders = made[0], made[1:]
    with concurrent.futures.ThreadPoolExecutor(max_workers=HELD) as pool:
        held = [pool.submit(agent.held, seen, 30) for agent, seen in holders]
        wait_until(lambda: held_now(web_tier.url) == HELD, timeout=30, what=f"{HELD} held requests")
        took = []
        for _ in range(20):
            sent = time.monotonic()
            response = plain.session()
            took.append(time.monotonic() - sent)
            assert response.status_code == 200, response.text
        assert held_now(web_tier.url) == HELD  # still held while the heartbeats were answered
        assert not any(future.done() for future in held)
        with transaction.atomic():  # release them all: one UPDATE
            nodes_set_daemon(node_ids=[agent.node_id for agent, _ in holders], daemon={"version": "1.0.0"})
        answers = [future.result(timeout=40)[0] for future in held]
    assert max(took) < 1.0, f"a plain heartbeat took {max(took):.3f} s"
    assert [answer.status_code for answer in answers] == [200] * HELD
    assert all(answer.json()["specRevision"] != seen for answer, (_, seen) in zip(answers, holders, strict=True))


def test_nginx_bounds_the_request_line_and_each_header_line(web_tier):
    """Nothing behind nginx bounds them (uvicorn's parser does not): 8 KiB each, as docker/nginx.conf says."""
    pools = f"{web_tier.url}/api/compute/pools/"
    assert httpx.get(pools, params={"q": "x" * 7000}, timeout=10).status_code == 401  # reached the API
    assert httpx.get(pools, params={"q": "x" * 9000}, timeout=10).status_code == 414
    assert httpx.get(pools, headers={"X-Padding": "x" * 7000}, timeout=10).status_code == 401
    assert httpx.get(pools, headers={"X-Padding": "x" * 9000}, timeout=10).status_code == 400


def test_each_agent_comes_back_to_the_web_process_that_read_it(web_tier, tenant):
    """nginx sends an agent's session requests to one gunicorn worker (its token hashed over the workers' own
    sockets: core/worker_sockets.py), so every watching arrival after a join is answered from what that worker read,
    without a statement, even when the agents' requests come together and nginx's upstream connections change hands."""
    pool = pool_create(tenant=tenant, name=f"affinity-{uuid.uuid4().hex[:6]}")
    made = []
    for _ in range(12):
        node, token = node_create(tenant=tenant, name=f"n-{uuid.uuid4().hex[:8]}", pool_id=pool.id, arch="amd64")
        made.append(Agent(url=web_tier.url, node_id=node.id, token=token))
    memory = 'fleet_watch_arrivals_total{read="memory"}'
    before = metric_sample(web_tier.url, memory)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(made)) as threads:
        joins = list(threads.map(lambda agent: agent.session(wait=1), made))  # a watching join: remembered
        assert [join.status_code for join in joins] == [200] * len(made), joins[0].text
        seen = {agent.token: join.json()["specRevision"] for agent, join in zip(made, joins, strict=True)}
        for _ in range(2):  # two rounds of arrivals held together, each agent's on its join's revision
            answers = list(threads.map(lambda agent: agent.held(seen[agent.token], 1)[0], made))
            assert [answer.status_code for answer in answers] == [200] * len(made), answers[0].text
    assert metric_sample(web_tier.url, memory) - before == 2 * len(made)
