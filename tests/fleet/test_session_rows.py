"""A session row is rewritten in place (docs/operations.md#session-rows): every kind of session write is a
heap-only update on PostgreSQL, so the row's versions never add index entries and the next reader of the page
prunes them without VACUUM. Adding an index on a column these writes change fails this test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from fleet.models import NodeSession
from fleet.services.nodes import heartbeat_seconds
from fleet.services.sessions import agent_heartbeat, agent_session_leave_for_token, agent_session_report_for_token
from fleet.services.watch import held_sessions_touch
from fleet.tokens import token_hash
from tests.fleet.conftest import make_node

pytestmark = pytest.mark.django_db

START = datetime(2031, 3, 5, 12, 0, tzinfo=UTC)


def _updates_in_this_transaction() -> tuple[int, int]:
    """The session table's updates so far in the test's transaction: (all, heap-only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
            [NodeSession._meta.db_table],
        )
        return cursor.fetchone()


def test_every_session_write_is_in_place(pool):
    node, token = make_node(pool)
    hashed = token_hash(token)
    interval = timedelta(seconds=heartbeat_seconds())
    agent_session_report_for_token(token_hash=hashed, daemon_version="1.0.0", protocol_version=3, now=START)
    before = _updates_in_this_transaction()

    # A heartbeat whose write is due, a held node's touch, a leave, a join on another version and protocol.
    assert agent_heartbeat(token_hash=hashed, daemon_version="1.0.0", protocol_version=3, now=START + interval)
    assert held_sessions_touch(node_ids=[node.id], now=START + 2 * interval) == 1
    assert agent_session_leave_for_token(token_hash=hashed, now=START + 3 * interval) is True
    joined = agent_session_report_for_token(
        token_hash=hashed, daemon_version="1.1.0", protocol_version=4, now=START + 4 * interval
    )
    assert joined is not None
    assert joined.joined

    updates, in_place = (after - first for after, first in zip(_updates_in_this_transaction(), before, strict=True))
    assert updates == 4
    assert in_place == updates


def test_session_pages_keep_room_for_new_versions():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [NodeSession._meta.db_table])
        assert cursor.fetchone()[0] == ["fillfactor=50"]
