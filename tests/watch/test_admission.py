"""Admission control in the async front (fleet/watch/admission.py, docs/operations.md#admission-control), over the
real web tier with a bound of 2: the third agent-session request under way is refused at once with 503
``overloaded`` and ``Retry-After``, nothing read or written; once the two drain the front serves again; held
requests never count. Requests are kept under way by a row lock the test holds on their sessions (a leave waits
for it in the database), not by timing."""

from __future__ import annotations

import concurrent.futures

import httpx
import psycopg
import pytest
from django.db import connection

from demo.processes import wait_until
from fleet.models import NodeSession
from tests.databases import database_url
from tests.watch.conftest import HEARTBEAT_SECONDS, SESSION, serve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

BOUND = 2
_requests = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="admission-request")


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    yield from serve(tmp_path_factory, heartbeat_seconds=HEARTBEAT_SECONDS, WEB_SESSIONS_IN_PROGRESS=str(BOUND))


def leave(agent) -> httpx.Response:
    return httpx.delete(agent.url + SESSION, headers={"Authorization": f"Bearer {agent.token}"}, timeout=60)


def waiting_on_locks() -> int:
    """The test database's backends waiting for a lock (the web process's leaves behind the test's row lock)."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [connection.settings_dict["NAME"]],
        ).fetchone()
    return count


def assert_overloaded(response: httpx.Response) -> int:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["code"] == "overloaded"
    assert body["detail"]
    wait = int(response.headers["Retry-After"])
    assert body["retryAfter"] == wait
    assert 1 <= wait <= HEARTBEAT_SECONDS  # never longer than an interval
    assert response.headers["X-Content-Type-Options"] == "nosniff"  # the headers of every answer
    return wait


def test_the_front_refuses_at_its_bound_at_once_and_serves_again_once_it_drains(server, agents):
    first, second, third = agents(3)
    before = NodeSession.objects.get(node=third.node)
    with psycopg.connect(database_url()) as lock:  # a transaction: the sessions stay locked until it ends
        node_ids = [str(first.node.id), str(second.node.id)]
        table = NodeSession._meta.db_table
        lock.execute(f"SELECT 1 FROM {table} WHERE node_id = ANY(%s::uuid[]) FOR UPDATE", [node_ids])  # noqa: S608
        under_way = [_requests.submit(leave, agent) for agent in (first, second)]
        wait_until(lambda: waiting_on_locks() >= BOUND, timeout=30, what="two leaves under way")

        assert_overloaded(third.session())
        assert_overloaded(leave(third))
        after = NodeSession.objects.get(node=third.node)
        assert (after.left_at, after.last_seen_at) == (before.left_at, before.last_seen_at)  # nothing written
        assert server.metric("fleet_watch_overloaded_total") == 2
        assert not any(future.done() for future in under_way)
        lock.rollback()

    assert [future.result(timeout=30).status_code for future in under_way] == [204, 204]
    assert third.session().status_code == 200  # drained: served again
    assert leave(third).status_code == 204
    assert NodeSession.objects.get(node=third.node).left_at is not None


def test_held_requests_do_not_count_against_the_bound(server, agents):
    watching = agents(BOUND + 1)
    plain = agents(1)[0]
    held = [agent.watch(seen=agent.session().json()["specRevision"], wait=60) for agent in watching]
    server.wait_held(len(watching))

    assert plain.session().status_code == 200  # three held, a bound of two: not refused
    assert leave(plain).status_code == 204

    for agent in watching:  # a leave wakes its held request (fleet/watch/hub.py), which answers
        assert leave(agent).status_code == 204
    assert [future.result(timeout=30)[0].status_code for future in held] == [200] * len(watching)
    server.wait_held(0)
