"""The agent session's statements and the plug-in's settle are read by column name into typed records
(core.statements.NamedRows, docs/architecture.md#watch): a column reordered reads the same values, and a column
added, renamed or dropped on one side only fails the statement's first run, here in the tests, not in production
by a silent shift of every later value."""

from __future__ import annotations

from collections import namedtuple
from typing import NamedTuple

import pytest
from django.utils import timezone

from core.statements import ColumnsMismatch, NamedRows, column_positions
from fleet import plugins
from fleet.plugins import JoinStep, register_join_step
from fleet.services.sessions import agent_heartbeat, agent_session_report_for_token
from fleet.services.watch import held_sessions_read
from fleet.tokens import token_hash
from rollout.controller.upgrade_transitions import succeed_rejoined
from tests.fleet.conftest import make_node, make_pool


class Pair(NamedTuple):
    a: int
    b: str


class Column(NamedTuple):
    name: str


def described(*names: str) -> list[Column]:
    return [Column(name) for name in names]


def test_a_reordered_column_reads_the_same_values():
    rows = NamedRows()
    assert rows.read("one", described("a", "b"), (1, "x"), (Pair,)) == [Pair(1, "x")]
    assert rows.read("two", described("b", "a"), ("x", 1), (Pair,)) == [Pair(1, "x")]
    # Two records share a row: each reads its own fields wherever they are.
    more = namedtuple("more", ["c"])
    host, step = rows.read("three", described("c", "b", "a"), (True, "x", 1), (Pair, more))
    assert (host, step) == (Pair(1, "x"), more(True))


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (("a", "b", "c"), "not read ['c']"),  # a column added to the statement only
        (("a",), "not selected ['b']"),  # a field added to the record only, or a column dropped
        (("a", "bee"), "not read ['bee'], not selected ['b']"),  # renamed on one side
        (("a", "b", "b"), "a name twice"),  # two plug-ins' columns named alike
    ],
)
def test_a_column_added_renamed_or_dropped_on_one_side_fails(names, why):
    with pytest.raises(ColumnsMismatch, match=why.replace("[", r"\[").replace("]", r"\]")):
        column_positions(described(*names), (Pair,))


def test_positions_are_found_once_per_statement():
    rows = NamedRows()
    rows.read("sql", described("b", "a"), ("x", 1), (Pair,))
    # The description is not read again for the same statement: the kept positions serve every later row.
    assert rows.read("sql", [], ("y", 2), (Pair,)) == [Pair(2, "y")]


@pytest.mark.django_db
def test_each_statement_is_read_by_its_records(tenant):
    """Every statement of the agent session and the plug-in's settle, run as production runs it, through its reader:
    a column added or removed on one side only raises here (``ColumnsMismatch``)."""
    node, token = make_node(make_pool(tenant))
    hashed = token_hash(token)
    joined = agent_session_report_for_token(token_hash=hashed, daemon_version="1.0.0", protocol_version=3)
    assert joined is not None
    assert (joined.joined, joined.node_id) == (True, node.id)
    heartbeat = agent_heartbeat(token_hash=hashed, daemon_version="1.0.0", protocol_version=3)
    assert heartbeat is not None
    assert (heartbeat.joined, heartbeat.node_id) == (False, node.id)
    assert held_sessions_read(token_hashes=[hashed])[hashed].node_id == node.id
    assert succeed_rejoined(node_id=node.id, version="1.0.0", at=timezone.now()) is False  # nothing in flight


@pytest.mark.django_db
def test_a_step_whose_record_misses_a_column_fails_the_join(tenant):
    _, token = make_node(make_pool(tenant))
    before = list(plugins._join_steps)
    register_join_step(
        JoinStep(
            ctes="test_seen AS (SELECT j.node_id FROM joined_node AS j)",
            columns={"test_node": "(SELECT node_id FROM test_seen)", "test_extra": "1"},
            record=namedtuple("test_row", ["test_node"]),
            params={},
            committed=lambda **kwargs: None,
        )
    )
    try:
        with pytest.raises(ColumnsMismatch, match="test_extra"):
            agent_session_report_for_token(token_hash=token_hash(token), daemon_version="1.0.0", protocol_version=3)
    finally:
        plugins._join_steps[:] = before
