"""specRevision changes when, and only when, the spec or the pending commands change; and the triggers NOTIFY
exactly those nodes, after the commit, whoever writes (docs/fleet.md#watch)."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from fleet.models import Command, Node, NodeSession
from fleet.services.commands import command_ack, command_enqueue
from fleet.services.nodes import nodes_set_daemon
from fleet.services.sessions import (
    agent_heartbeat,
    agent_session_leave_for_token,
    agent_session_report,
    agent_session_report_for_token,
)
from fleet.services.watch import NOTIFY_CHANNEL, held_sessions_touch
from fleet.tokens import token_hash
from fleet.watch.hub import notification
from tests.fleet.conftest import agent_client, make_node, make_nodes, make_pool
from tests.watch.conftest import SESSION, database_url

pytestmark = pytest.mark.django_db(transaction=True)

DAEMON = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "c" * 64}


@pytest.fixture
def notified():
    """A LISTEN connection of the test's own: ``notified()`` is the set of node ids notified since the last call."""
    yield from listening(NOTIFY_CHANNEL)


def listening(channel: str):
    """A LISTEN connection on ``channel``, yielding the ``notified`` fixture's function."""
    conn = psycopg.connect(database_url(), autocommit=True)
    conn.execute(f'LISTEN "{channel}"')
    payloads: list[str] = []

    def drain() -> set[uuid.UUID]:
        # A NOTIFY is queued at the commit that sent it and reaches this connection within milliseconds.
        batch = [n.payload for n in conn.notifies(timeout=0.2)]
        payloads.extend(batch)
        return {uuid.UUID(key) for payload in batch for key in notification(payload)[1]}

    drain.payloads = payloads  # type: ignore[attr-defined]
    try:
        yield drain
    finally:
        conn.close()


def revision(node: Node) -> str:
    node = Node.objects.select_related("session").get(pk=node.pk)
    return agent_session_report(node=node, daemon_version="1.0.0", protocol_version=3).spec_revision


def test_every_change_of_spec_or_pending_commands_changes_the_revision_and_nothing_else_does(tenant, notified):
    pool = make_pool(tenant)
    node, token = make_node(pool)
    other, _ = make_node(pool)
    joined = agent_client(token).post(SESSION, {"daemonVersion": "1.0.0", "protocolVersion": 3}, format="json")
    first = joined.json()["specRevision"]
    notified()

    # The fast path (one statement) and the join path (DRF) name the same state the same way.
    fast = agent_heartbeat(token_hash=token_hash(token), daemon_version="1.0.0", protocol_version=3)
    assert fast is not None
    assert fast.spec_revision == first == revision(node)

    def unchanged(write) -> None:
        before = revision(node)
        write()
        assert revision(node) == before
        assert node.id not in notified()

    def changed(write) -> None:
        before = revision(node)
        write()
        assert revision(node) != before
        assert node.id in notified()

    # Not a change of what the agent is told: heartbeats, other rows, other nodes, the same spec again.
    unchanged(lambda: revision(node))
    unchanged(lambda: Node.objects.filter(pk=node.pk).update(name="renamed"))
    unchanged(lambda: command_enqueue(node_id=other.id, kind="daemon.upgrade", payload={"version": "2"}))
    changed(lambda: nodes_set_daemon(node_ids=[node.id], daemon=DAEMON))
    unchanged(lambda: nodes_set_daemon(node_ids=[node.id], daemon=DAEMON))
    # Pending commands: enqueued, superseded (cancelled), acked, and what happens to rows no longer pending.
    command = command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "1.5.0"})
    assert node.id in notified()
    changed(lambda: command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "1.6.0"}))
    newest = Command.objects.filter(node_id=node.id, state="pending").get()
    changed(lambda: command_ack(node_id=node.id, command_id=newest.id, ok=True))
    done = Command.objects.filter(pk=newest.pk)  # acked, then done (as a join on 1.6.0 completes it)
    unchanged(lambda: done.update(state=Command.State.DONE, completed_at=newest.created_at))
    unchanged(lambda: Command.objects.filter(pk=command.pk).update(error="cancelled rows are not shown"))
    changed(lambda: Command.objects.create(node_id=node.id, kind="daemon.upgrade", created_at=newest.created_at))
    changed(lambda: Command.objects.filter(node_id=node.id, state="pending").delete())
    # Raw SQL is a writer like any other.
    with connection.cursor() as cursor:
        changed(lambda: cursor.execute("UPDATE fleet_node SET spec = '{\"daemon\": null}' WHERE id = %s", [node.id]))


def test_a_rolled_back_change_wakes_nobody(tenant, notified):
    node, _ = make_node(make_pool(tenant))
    notified()

    def change_then_fail() -> None:
        with transaction.atomic():
            nodes_set_daemon(node_ids=[node.id], daemon=DAEMON)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        change_then_fail()
    assert notified() == set()


def test_a_burst_is_a_few_notifications_under_the_payload_limit(tenant, notified):
    nodes = make_nodes(make_pool(tenant), 1000)
    notified()
    nodes_set_daemon(node_ids=[n.id for n in nodes], daemon=DAEMON)  # one statement, as a tick's start
    assert notified() == {n.id for n in nodes}
    payloads = notified.payloads  # type: ignore[attr-defined]
    assert len(payloads) == 5  # 240 ids each
    assert max(len(p.encode()) for p in payloads) < 8000
    # Each names the transaction that sent it: the statement's.
    assert len({notification(p)[0] for p in payloads}) == 1
    assert notification(payloads[0])[0] is not None


def test_a_notification_names_the_transaction_that_sent_it(tenant, notified):
    """The join's statement returns its transaction's id, and the join's notification names the same: the web
    process that ran the join keeps what it read (fleet/watch/known.py)."""
    node = make_nodes(make_pool(tenant), 1)[0]
    agent_session_report_for_token(token_hash=node.agent_token_hash, daemon_version="0.9.0", protocol_version=3)
    notified()
    report = agent_session_report_for_token(
        token_hash=node.agent_token_hash, daemon_version="1.0.0", protocol_version=3
    )
    assert report is not None
    assert report.joined
    assert report.written_by is not None
    payloads = notified.payloads  # type: ignore[attr-defined]
    assert notified() == {node.id}
    assert [notification(p) for p in payloads[-1:]] == [(report.written_by, [node.id.hex])]
    # A web process still running the code before migration 0010 (a rolling deploy) reads every item as a node id:
    # the transaction's is one no node has, and the notification is not dropped.
    ids = [uuid.UUID(hex=item) for item in payloads[-1].split(",")]
    assert node.id in ids
    assert ids[0] != node.id
    assert ids[0].version is None
    # The same statement as a heartbeat (the session open on that version) notifies nothing.
    again = agent_session_report_for_token(token_hash=node.agent_token_hash, daemon_version="1.0.0", protocol_version=3)
    assert again is not None
    assert not again.joined
    assert notified() == set()


def test_a_change_a_heartbeat_would_read_is_notified_and_a_heartbeat_is_not(tenant, notified):
    """What tells a web process that its memory of a node is stale (fleet/watch/known.py): the node's session
    opened, closed, on another version or protocol, seen earlier than it was, or gone; its token replaced; the
    node gone."""
    node, token = make_node(make_pool(tenant))
    client = agent_client(token)

    def session(version: str = "1.0.0", protocol: int = 3) -> None:
        response = client.post(SESSION, {"daemonVersion": version, "protocolVersion": protocol}, format="json")
        assert response.status_code == 200

    session()  # the first session: nothing could have been read of it before
    notified()
    session()
    agent_heartbeat(token_hash=token_hash(token), daemon_version="1.0.0", protocol_version=3)
    assert held_sessions_touch(node_ids=[node.id], now=timezone.now() + timedelta(hours=1)) == 1  # written, forward
    assert node.id not in notified()

    for change in (
        lambda: session(protocol=4),
        lambda: session(version="1.1.0", protocol=4),
        lambda: client.delete(SESSION),
        lambda: session(),
        lambda: NodeSession.objects.filter(node=node).update(last_seen_at=timezone.now() - timedelta(hours=1)),
        lambda: NodeSession.objects.filter(node=node).delete(),
        lambda: Node.objects.filter(pk=node.pk).update(agent_token_hash="0" * 64),
        lambda: Node.objects.filter(pk=node.pk).delete(),
    ):
        change()
        assert node.id in notified()


def test_a_session_s_changes_are_told_to_the_process_it_records_as_its_watcher_alone(tenant, notified):
    """A web process's watching agents' sessions record it as their watcher (``watched_by``, its hub's ident: its
    agents' joins and its keeper's touches write it), and it remembers only reads that name it
    (fleet/watch/known.py): what would make them stale is told on its channel alone
    (fleet/migrations/0011_session_watched_by.py); a new watcher is told nothing, the one before is. What may
    concern a request held in any process stays on the shared channel: the spec, the token, the node."""
    node, token = make_node(make_pool(tenant))
    hashed = token_hash(token)
    listeners = [listening(f"{NOTIFY_CHANNEL}_{ident}") for ident in ("a", "b")]
    told = {"a": next(listeners[0]), "b": next(listeners[1]), "everyone": notified}
    try:
        told_alone(node, hashed, told)
    finally:
        for listener in listeners:
            listener.close()


def told_alone(node: Node, hashed: str, told: dict) -> None:
    """The rule of the test above, over ``told``: per channel, its listener's ``notified``."""

    def only(*channels: str) -> None:
        heard = {name for name, drain in told.items() if node.id in drain()}
        assert heard == set(channels)

    joined = agent_session_report_for_token(token_hash=hashed, daemon_version="1.0.0", protocol_version=3, watcher="a")
    assert joined is not None
    assert joined.watched_by == "a"
    only()  # the first session: no process could have read it before
    agent_session_leave_for_token(token_hash=hashed)
    only("a")
    rejoined = agent_session_report_for_token(token_hash=hashed, daemon_version="1.0.0", protocol_version=3)
    assert rejoined is not None
    assert rejoined.watched_by == "a"  # a call that names no watcher keeps the one recorded
    only("a")
    # Another process's watching agent's heartbeat, nothing due: nothing written, for the watcher alone neither
    # (after a restart of the web tier, every agent's first arrival would be a write), and "a" stays recorded.
    heartbeat = agent_heartbeat(token_hash=hashed, daemon_version="1.0.0", protocol_version=3, watcher="b")
    assert heartbeat is not None
    assert heartbeat.watched_by == "a"
    only()
    # That process's keeper, holding the node: it records "b", and "a" is told.
    assert held_sessions_touch(node_ids=[node.id], watcher="b") == 1
    only("a")
    assert held_sessions_touch(node_ids=[node.id], watcher="b") == 0
    only()  # the same watcher again, nothing due: nothing written, nobody told
    heartbeat = agent_heartbeat(token_hash=hashed, daemon_version="1.0.0", protocol_version=3, watcher="b")
    assert heartbeat is not None
    assert heartbeat.watched_by == "b"
    NodeSession.objects.filter(node=node).update(last_seen_at=timezone.now() - timedelta(hours=1))
    only("b")
    nodes_set_daemon(node_ids=[node.id], daemon=DAEMON)
    only("everyone")
    NodeSession.objects.filter(node=node).delete()
    only("b")
    Node.objects.filter(pk=node.pk).update(agent_token_hash="0" * 64)
    only("everyone")


WATCHER_MIGRATION = importlib.import_module("fleet.migrations.0011_session_watched_by")


def _session_triggers() -> dict[str, str]:
    """The session table's watch triggers: name -> the function each runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.tgname, p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE t.tgrelid = 'fleet_nodesession'::regclass AND NOT t.tgisinternal"
        )
        return dict(cursor.fetchall())


def test_migration_0011_goes_back_to_every_process_being_told(tenant):
    """Reversed, 0011's SQL leaves the triggers of 0007 (every change to a session on the shared channel) and 0010's
    one-argument notify; forward again, the watcher's channel."""
    forward = {"fleet_session_watch": "fleet_session_watch", "fleet_session_delete_watch": "fleet_session_watch"}
    assert _session_triggers() == forward
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(WATCHER_MIGRATION.BACKWARD)
        assert _session_triggers() == {
            "fleet_session_watch": "fleet_row_watch",
            "fleet_session_delete_watch": "fleet_row_watch",
        }
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'fleet_watch_notify'")
            assert cursor.fetchone() == (1,)
            cursor.execute(WATCHER_MIGRATION.FORWARD)
        assert _session_triggers() == forward
        transaction.set_rollback(True)
