"""A watching agent's next arrival is held on what the web process last read, without a statement, while nothing
says it changed (fleet/watch/known.py); anything that could make a heartbeat read differently reads the database
again. Over the real web tier, its heartbeat interval 2 s (its keeper touches held nodes every second)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import psycopg
import pytest
from django.utils import timezone

from demo.processes import wait_until
from fleet.models import Node, NodeSession
from fleet.services.nodes import online_node_q
from tests.watch.conftest import SESSION, Agent, Server, database_url, listener_pids, serve

pytestmark = pytest.mark.django_db(transaction=True)

# A held session's last_seen_at is due one INTERVAL after the keeper's last touch (every INTERVAL / 2): the
# keeper may run up to INTERVAL / 2 late, on a busy machine, before an arrival takes the statement path.
INTERVAL = 4
WAIT = 2  # a hold spans at least one keeper round


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, heartbeat_seconds=INTERVAL)


@pytest.fixture
def heartbeat_seconds(settings):
    settings.FLEET_HEARTBEAT_SECONDS = INTERVAL
    return INTERVAL


def arrivals(server: Server) -> dict[str, int]:
    """The server's count of held arrivals by how they were read ('database', 'memory')."""
    return {read: server.metric(f'fleet_watch_arrivals_total{{read="{read}"}}') for read in ("database", "memory")}


def hold(agent: Agent, seen: str) -> tuple[httpx.Response, float]:
    """A held request with ``seen``: its answer and how long it took."""
    started = time.monotonic()
    response = agent.session(wait=WAIT, seen=seen)
    assert response.status_code == 200, response.text
    return response, time.monotonic() - started


def watched(server: Server, agent: Agent) -> str:
    """The agent watches until an arrival is held from memory: the revision it holds on."""
    seen = agent.session().json()["specRevision"]
    before = arrivals(server)["memory"]
    for _ in range(5):
        response, _ = hold(agent, seen)
        assert response.json()["specRevision"] == seen
        if arrivals(server)["memory"] > before:
            return seen
    raise AssertionError(f"no arrival held from memory: {arrivals(server)}")


def without_notify(sql: str, params: list) -> None:
    """A write the triggers do not see (replication role): nobody is told of it."""
    with psycopg.connect(database_url(), autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(sql, params)


def test_a_watching_agent_s_arrivals_are_held_from_memory_and_it_stays_online(server, agents, heartbeat_seconds):
    (agent,) = agents(1)
    seen = watched(server, agent)
    before = arrivals(server)
    for _ in range(3):
        response, took = hold(agent, seen)
        assert response.json()["specRevision"] == seen
        assert took >= WAIT - 0.1  # held to its wait, not answered at once
        session = NodeSession.objects.get(node=agent.node)
        # What the arrival's statement would have left: last_seen_at within an interval of now.
        assert (timezone.now() - session.last_seen_at).total_seconds() < INTERVAL
        assert Node.objects.filter(online_node_q(now=timezone.now()), pk=agent.node.pk).exists()
    after = arrivals(server)
    assert after["memory"] - before["memory"] >= 2, (before, after)

    # Proof that no statement read them: a change written where no trigger sees it is not in the answer.
    without_notify('UPDATE fleet_node SET spec = \'{"daemon": null, "unseen": 1}\' WHERE id = %s', [agent.node.id])
    response, took = hold(agent, seen)
    assert arrivals(server)["memory"] == after["memory"] + 1
    assert response.json()["specRevision"] == seen
    assert took >= WAIT - 0.1
    # The next change that is notified wakes it, and the answer is read from the database: both changes.
    Node.objects.filter(pk=agent.node.pk).update(spec={"daemon": None, "seen": 2})
    response, _ = hold(agent, seen)
    assert response.json()["spec"] == {"daemon": None, "seen": 2}


def test_a_change_to_the_spec_is_answered_at_once(server, agents):
    (agent,) = agents(1)
    seen = watched(server, agent)
    Node.objects.filter(pk=agent.node.pk).update(spec={"daemon": None, "changed": True})
    response, took = hold(agent, seen)
    assert response.json()["spec"] == {"daemon": None, "changed": True}
    assert took < WAIT - 0.5


def _leave(agent: Agent) -> None:
    response = httpx.delete(agent.url + SESSION, headers={"Authorization": f"Bearer {agent.token}"}, timeout=10)
    assert response.status_code == 204


def _other_version(agent: Agent) -> None:
    assert httpx.post(
        agent.url + SESSION,
        json={"daemonVersion": "1.0.0", "protocolVersion": agent.protocol},
        headers={"Authorization": f"Bearer {agent.token}"},
        timeout=10,
    ).is_success


def _other_protocol(agent: Agent) -> None:
    assert agent.session(protocolVersion=agent.protocol + 1).is_success


@pytest.mark.parametrize(
    ("change", "then"),
    [
        (_leave, lambda s: s.left_at is None),  # the arrival is a join again
        (_other_version, lambda s: s.daemon_version == "0.9.0"),  # a version change back
        (_other_protocol, lambda s: s.protocol_version == 3),
        (lambda a: NodeSession.objects.filter(node=a.node).delete(), lambda s: s.left_at is None),
        (  # as an agent away for an hour: the arrival writes last_seen_at, and the node is online at once
            lambda a: NodeSession.objects.filter(node=a.node).update(last_seen_at=timezone.now() - timedelta(hours=1)),
            lambda s: (timezone.now() - s.last_seen_at).total_seconds() < INTERVAL,
        ),
    ],
    ids=["left", "another-version-joined", "another-protocol", "session-deleted", "last-seen-moved-back"],
)
def test_a_change_to_the_session_reads_the_database_again(server, agents, change, then):
    (agent,) = agents(1)
    seen = watched(server, agent)
    change(agent)
    before = arrivals(server)
    response, _ = hold(agent, seen)
    assert arrivals(server)["memory"] == before["memory"]
    assert then(NodeSession.objects.get(node=agent.node)), "the arrival was not recorded as the database would"
    assert response.json()["specRevision"] == seen


@pytest.mark.parametrize(
    "change",
    [
        lambda node: Node.objects.filter(pk=node.pk).update(agent_token_hash="0" * 64),
        lambda node: Node.objects.filter(pk=node.pk).delete(),
    ],
    ids=["token-replaced", "node-deleted"],
)
def test_a_token_no_longer_valid_is_refused_at_once(server, agents, change):
    (agent,) = agents(1)
    seen = watched(server, agent)
    change(agent.node)
    response = agent.session(wait=WAIT, seen=seen)
    assert response.status_code == 401


def test_a_lost_subscription_forgets_what_was_read(server, agents):
    (agent,) = agents(1)
    seen = watched(server, agent)
    with psycopg.connect(database_url(), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", [listener_pids()])
    # What changes while nobody listens is read, once the process LISTENs again, by the next arrival.
    without_notify('UPDATE fleet_node SET spec = \'{"daemon": null, "missed": 1}\' WHERE id = %s', [agent.node.id])
    deadline = time.monotonic() + 20
    while len(listener_pids()) != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    response, _ = hold(agent, seen)
    assert response.json()["spec"] == {"daemon": None, "missed": 1}


def wake_reads(server: Server) -> int:
    """Statements the server ran to read woken held requests again (fleet/watch/reads.py)."""
    return server.metric("fleet_watch_wake_reads_total")


def test_requests_woken_by_one_commit_are_read_together(server, agents):
    """Held requests a notification wakes read their nodes again together: fewer statements than requests
    (fleet/watch/reads.py), each answered with what was committed, within a second."""
    group = agents(8)
    seens = [agent.session().json()["specRevision"] for agent in group]
    held = [agent.watch(seen, wait=30) for agent, seen in zip(group, seens, strict=True)]
    server.wait_held(len(group))
    statements = wake_reads(server)
    changed = time.monotonic()
    Node.objects.filter(pk__in=[agent.node.pk for agent in group]).update(spec={"daemon": None, "round": 1})
    answers = [future.result(timeout=10) for future in held]
    assert [response.json()["spec"] for response, _ in answers] == [{"daemon": None, "round": 1}] * len(group)
    assert all(arrived - changed < 1 for _, arrived in answers)
    assert 1 <= wake_reads(server) - statements <= len(group) // 2, "one statement per woken request"


def joined(server: Server, agent: Agent, version: str) -> str:
    """The agent restarts on ``version`` and joins as a watching agent does (``wait`` without ``seen``, taken for a
    join at once): the revision it then holds on. Its session was open on another version: a join."""
    agent.version = version
    before = arrivals(server)
    started = time.monotonic()
    response = agent.session(wait=WAIT)
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < WAIT - 0.5  # nothing seen: answered at once
    assert arrivals(server)["database"] == before["database"] + 1
    session = NodeSession.objects.get(node=agent.node)
    assert (session.daemon_version, session.left_at) == (version, None)
    return response.json()["specRevision"]


def test_the_arrival_after_a_join_is_held_from_memory(server, agents):
    """The join's own notifications (its session opened) do not drop what it read: the upgraded agent's next
    arrival is held without a statement, as an idle one's is."""
    (agent,) = agents(1)  # its session open on 0.9.0
    seen = joined(server, agent, "1.0.0")
    before = arrivals(server)
    # Proof that no statement reads it: a change written where no trigger sees it is not in the answer.
    without_notify('UPDATE fleet_node SET spec = \'{"daemon": null, "unseen": 1}\' WHERE id = %s', [agent.node.id])
    response, took = hold(agent, seen)
    assert arrivals(server)["memory"] == before["memory"] + 1, (before, arrivals(server))
    assert response.json()["specRevision"] == seen
    assert took >= WAIT - 0.1  # held to its wait: the join's notification, arriving meanwhile, woke nothing


@pytest.mark.parametrize(
    ("change", "then"),
    [
        (_leave, lambda session, answer: session.left_at is None),  # the arrival is a join again
        (
            lambda a: Node.objects.filter(pk=a.node.pk).update(spec={"daemon": None, "after": 1}),
            lambda session, answer: answer["spec"] == {"daemon": None, "after": 1},
        ),
    ],
    ids=["left", "spec-changed"],
)
def test_another_transaction_after_a_join_reads_the_database_again(server, agents, change, then):
    (agent,) = agents(1)
    seen = joined(server, agent, "1.0.0")
    change(agent)
    before = arrivals(server)
    response = agent.session(wait=WAIT, seen=seen)
    assert response.status_code == 200, response.text
    assert arrivals(server)["memory"] == before["memory"]
    assert then(NodeSession.objects.get(node=agent.node), response.json())


NOTIFIED = "fleet_watch_notifications_total"


@pytest.fixture(scope="module")
def other_server(django_db_setup, tmp_path_factory) -> Iterator[Server]:
    """A second web process on the same database (as another gunicorn worker, or another host, would be); its
    keeper touches the nodes it holds every half second."""
    yield from serve(tmp_path_factory, heartbeat_seconds=1)


def test_a_process_no_longer_the_session_s_watcher_reads_the_database_again(server, other_server, agents):
    """A change to a session is told to the process it records as its watcher alone (docs/fleet.md#watch). Another
    process holding the agent records itself (its keeper's touch); the first is told, and forgets what it read: a
    change told only to the second is not missed when the agent comes back to the first."""
    (agent,) = agents(1)
    seen = watched(server, agent)
    first = NodeSession.objects.get(node=agent.node).watched_by
    told = server.metric(NOTIFIED)
    held = dataclasses.replace(agent, url=other_server.url).watch(seen, wait=30)
    wait_until(lambda: NodeSession.objects.get(node=agent.node).watched_by not in (None, first), timeout=10, poll=0.05)
    wait_until(lambda: server.metric(NOTIFIED) > told, timeout=10, poll=0.05, what="the first process told")
    told, told_second = server.metric(NOTIFIED), other_server.metric(NOTIFIED)
    # Told to the second process alone: the session closed (as an operator's script, or a leave elsewhere, would).
    NodeSession.objects.filter(node=agent.node).update(left_at=timezone.now())
    wait_until(lambda: other_server.metric(NOTIFIED) > told_second, timeout=10, poll=0.05, what="the second told")
    assert server.metric(NOTIFIED) == told
    assert held.result(timeout=10)[0].status_code == 200  # woken: its session left, answered
    before = arrivals(server)
    hold(agent, seen)
    assert arrivals(server)["memory"] == before["memory"], "answered from a read the session's watcher had moved off"
    session = NodeSession.objects.get(node=agent.node)
    assert session.left_at is None  # the arrival was a join, as the database says
    assert session.watched_by == first
