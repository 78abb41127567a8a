"""What a join and a leave cost through the async front (fleet/watch/front.py), counted: every SQL statement the
test process runs while the front, built as project/asgi.py builds it, answers them in-process. A statement on one
of Django's threads (DRF back in the path) or one statement more fails these tests; docs/architecture.md#watch says
what each statement is."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from fleet.models import NodeSession
from fleet.plugins import join_steps, session_fields
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from fleet.services.session_statements import HEARTBEAT_SQL, LEAVE_SQL, join_sql
from fleet.watch import application
from rollout.controller.tick import rollout_tick
from rollout.controller.tick_requests import ASK_TICK_SQL
from rollout.models import NodeUpgrade, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.watch.conftest import SESSION

pytestmark = pytest.mark.django_db(transaction=True)

#: The join's one statement, rollout's settle in it (rollout/hooks.py ``SETTLE_ON_JOIN``).
JOIN_SQL = join_sql(join_steps())


class Statements:
    """The statements run on the test process's other threads (the front's and Django's), with each one's thread."""

    def __init__(self) -> None:
        self.run: list[tuple[str, str]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.run.append((threading.current_thread().name, sql))
        return execute(sql, params, many, context)

    def connected(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if threading.current_thread() is not threading.main_thread() and self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)

    def during(self, call: Any) -> tuple[Any, list[tuple[str, str]]]:
        session_fields()  # the plug-ins' fields are read once per process per period (rollout/registry/roots.py)
        first = len(self.run)
        result = call()
        return result, self.run[first:]


@pytest.fixture
def front(settings) -> Iterator[tuple[Any, Statements]]:
    """The ASGI application with one session thread and one Django thread, and what they run."""
    settings.WEB_THREADS = 1
    statements = Statements()
    connection_created.connect(statements.connected)
    app = application()
    try:
        yield app, statements
    finally:
        connection_created.disconnect(statements.connected)

        async def close() -> None:  # the threads' own connections: the test database can go
            await app.threads.run(lambda: connection.close())

        asyncio.run(close())
        app.django.executor.submit(lambda: connection.close()).result()


def call(app: Any, method: str, token: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request to the front, as a server hands it over: status, headers, body."""
    content = json.dumps(body).encode() if body is not None else b""
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": SESSION, "raw_path": SESSION.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 40000), "server": ("testserver", 80),
    }  # fmt: skip
    sent: list[dict] = []

    async def main() -> None:
        messages = [{"type": "http.request", "body": content, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # nobody hangs up
            raise AssertionError

        async def send(message: dict) -> None:
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(main())
    start_message = sent[0]
    answer = {name.decode(): value.decode() for name, value in start_message["headers"]}
    return start_message["status"], answer, b"".join(m.get("body", b"") for m in sent[1:])


def on_session_thread(run: list[tuple[str, str]]) -> list[str]:
    """The statements, all of them on the front's session thread (none on Django's)."""
    assert {thread for thread, _ in run} <= {"session_0"}, run
    return [sql for _, sql in run]


@pytest.fixture
def agent(tenant):
    pool = pool_create(tenant=tenant, name="statements", disruption_budget="1")
    node, token = node_create(tenant=tenant, name="n-1", pool_id=pool.id, arch="amd64")
    return node, token


def join_body(version: str = "0.9.0") -> dict:
    return {"daemonVersion": version, "protocolVersion": 3}


def test_a_leave_is_one_statement_on_the_session_thread(front, agent):
    app, statements = front
    node, token = agent
    assert call(app, "POST", token, join_body())[0] == 200
    (status, headers, body), run = statements.during(lambda: call(app, "DELETE", token))
    assert (status, body, headers["allow"]) == (204, b"", "POST, DELETE, OPTIONS")
    assert on_session_thread(run) == [LEAVE_SQL]
    assert NodeSession.objects.get(node=node).left_at is not None


def test_a_first_join_with_no_upgrade_in_flight(front, agent):
    app, statements = front
    _, token = agent
    (status, _, body), run = statements.during(lambda: call(app, "POST", token, join_body()))
    assert status == 200, body
    assert json.loads(body)["spec"] == {"daemon": None}
    assert on_session_thread(run) == [HEARTBEAT_SQL, JOIN_SQL]


def upgrading(app: Any, node: Any, token: str) -> Any:
    """The node's agent joined on 0.9.0, a rollout to 1.0.0 started its upgrade, and the agent left to restart:
    the rollout."""
    assert call(app, "POST", token, join_body())[0] == 200
    rollout = rollout_create(tenant=node.tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    rollout_tick(rollout_id=rollout.id)
    assert call(app, "DELETE", token)[0] == 204
    return rollout


def test_a_join_that_settles_the_node_s_upgrade(front, agent, releases):
    app, statements = front
    node, token = agent
    rollout = upgrading(app, node, token)
    (status, _, body), run = statements.during(lambda: call(app, "POST", token, join_body("1.0.0")))
    assert status == 200, body
    assert NodeUpgrade.objects.get(rollout=rollout, node=node).state == "succeeded"
    assert on_session_thread(run) == [HEARTBEAT_SQL, JOIN_SQL, ASK_TICK_SQL]


def test_a_join_that_settles_while_a_tick_is_queued_asks_for_nothing(front, agent, releases):
    """The queued tick's start waits for the settle's commit (controller/statements.py): the join's statement,
    the settle in it, is its only one."""
    app, statements = front
    node, token = agent
    rollout = upgrading(app, node, token)
    TickRequest.objects.filter(rollout=rollout).update(queued=True)
    (status, _, body), run = statements.during(lambda: call(app, "POST", token, {**join_body("1.0.0"), "wait": 1}))
    assert status == 200, body
    assert NodeUpgrade.objects.get(rollout=rollout, node=node).state == "succeeded"
    assert on_session_thread(run) == [JOIN_SQL]


def test_a_watching_agent_s_join_is_the_join_s_statement_alone(front, agent, releases):
    """``wait`` without ``seen`` (a watching agent's first request) is taken for a join: no heartbeat's statement
    first. Taken so wrongly (the session open on that version), it is answered as the heartbeat would be."""
    app, statements = front
    node, token = agent
    assert call(app, "POST", token, join_body())[0] == 200
    (status, _, body), run = statements.during(lambda: call(app, "POST", token, {**join_body("1.0.0"), "wait": 1}))
    assert status == 200, body
    assert on_session_thread(run) == [JOIN_SQL]
    assert NodeSession.objects.get(node=node).daemon_version == "1.0.0"
    session = NodeSession.objects.get(node=node)
    (status, _, again), run = statements.during(lambda: call(app, "POST", token, {**join_body("1.0.0"), "wait": 1}))
    assert status == 200, again
    assert on_session_thread(run) == [JOIN_SQL]  # open on that version: nothing joined, nothing settled
    assert json.loads(again)["specRevision"] == json.loads(body)["specRevision"]
    assert NodeSession.objects.get(node=node).joined_at == session.joined_at
