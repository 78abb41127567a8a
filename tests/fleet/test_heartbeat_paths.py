"""The plain heartbeat's statement and the held requests' two, each against its rules (tests/fleet/session_rules.py
restates the heartbeat's).

``agent_heartbeat`` runs ``HEARTBEAT_SQL`` (fleet/services/session_statements.py): the coalesced ``last_seen_at``
write (``last_seen_due_sql``; module docstring of fleet/services/sessions.py) and the fleet pulse
(fleet/services/liveness.py ``pulse_ctes``). Hypothesis draws a node's state around every boundary of those rules
(session none, open or left, on the reported version or another; ``last_seen_at`` long ago, at the interval, just
under it, ahead of now; protocol version the same or changed; pending and settled commands; the pulse row missing,
heard just now, at the one-second throttle, at the gap, before it, ahead; the token known or not) and runs the
statement on it in a savepoint rolled back afterwards. Its outcome must be what the rules say: the report (or None),
the session row and the pulse row after. A woken held request's read (``held_sessions_read``) must answer what that
heartbeat would and write nothing; the keeper's touch (``held_sessions_touch``) writes the sessions that are due.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from django.db import transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fleet.models import Command, FleetPulse, NodeSession
from fleet.services import liveness
from fleet.services.liveness import GAP_HEARTBEATS, PULSE_EVERY
from fleet.services.nodes import heartbeat_seconds
from fleet.services.sessions import SessionReport, agent_heartbeat
from fleet.services.watch import held_sessions_read, held_sessions_touch, touched_within
from tests.fleet.conftest import make_node
from tests.fleet.node_states import NOW, PROTOCOL, TICK, VERSION, write_node_state
from tests.fleet.session_rules import heartbeat_after, rows_before

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class NodeState:
    session: str  # "none", "open" or "left"
    same_version: bool  # the stored daemon version is the one the agent reports
    last_seen: timedelta  # last_seen_at - NOW
    same_protocol: bool
    commands: tuple[tuple[str, int], ...]  # (state, seconds after NOW - 1 h); equal times order by id
    pulse: timedelta | None  # last_heard_at - NOW; None: no pulse row yet
    listening: timedelta  # listening_since - last_heard_at
    spec: dict[str, Any]
    known_token: bool
    watched_by: str | None = None  # the web process the session records as its watcher
    watcher: str | None = None  # the one the call asks to record (the async front's, for a watching agent)


def _offsets(boundaries: list[timedelta]) -> st.SearchStrategy[timedelta]:
    """Each boundary, a microsecond either side, or anywhere from an hour ago to a minute ahead."""
    exact = [moment + shift for moment in boundaries for shift in (-TICK, timedelta(0), TICK)]
    anywhere = st.integers(-3600 * 10**6, 60 * 10**6).map(lambda us: timedelta(microseconds=us))
    return st.one_of(st.sampled_from(exact), anywhere)


def states() -> st.SearchStrategy[NodeState]:
    interval = timedelta(seconds=heartbeat_seconds())
    gap = timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())
    return st.builds(
        NodeState,
        session=st.sampled_from(["open", "open", "open", "left", "none"]),
        same_version=st.booleans() | st.just(True),
        last_seen=_offsets([-timedelta(hours=1), -interval, timedelta(0), timedelta(seconds=5)]),
        same_protocol=st.booleans(),
        commands=st.lists(
            st.tuples(st.sampled_from([*Command.State.values, Command.State.PENDING]), st.integers(0, 2)), max_size=4
        ).map(tuple),
        pulse=st.none() | _offsets([-timedelta(hours=1), -gap, -PULSE_EVERY, timedelta(0), timedelta(seconds=1)]),
        listening=st.sampled_from([-timedelta(hours=2), -timedelta(seconds=5), timedelta(0)]),
        spec=st.sampled_from(
            [
                {"daemon": None},
                {"daemon": {"version": "1.5.0", "url": "https://dl.example/bcd", "sha256": "c" * 64}},
                {"daemon": {"version": "é", "sizes": [1, 2.5, None], "nested": {"b": True, "a": {}}}},
            ]
        ),
        known_token=st.booleans() | st.just(True),
        watched_by=st.sampled_from([None, "a", "b"]),
        watcher=st.sampled_from([None, "a"]),
    )


def write(state: NodeState, node_id: UUID) -> None:
    write_node_state(
        node_id, spec=state.spec, session=state.session, same_version=state.same_version,
        same_protocol=state.same_protocol, last_seen=state.last_seen,
        commands=[(command_state, f"2.{n}.0", seconds) for n, (command_state, seconds) in enumerate(state.commands)],
        pulse=state.pulse, listening=state.listening, watched_by=state.watched_by,
    )  # fmt: skip


def outcome(
    path, *, token_hash: str, node_id: UUID, watcher: str | None = None
) -> tuple[SessionReport | None, Any, Any]:
    """What ``path`` answers and leaves written, rolled back afterwards.

    The process's pulse throttle is unset first: the rule is the database's, the throttle only skips queries
    (tests/conftest.py restores it after the test).
    """
    liveness._last_written_at = None
    with transaction.atomic():
        report = path(
            token_hash=token_hash, daemon_version=VERSION, protocol_version=PROTOCOL, now=NOW, watcher=watcher
        )
        session = NodeSession.objects.filter(node_id=node_id).values().first()
        pulse = FleetPulse.objects.values("last_heard_at", "listening_since").first()
        transaction.set_rollback(True)
    return report, session, pulse


def _state(**changes: Any) -> NodeState:
    """An open session on the reported version, last seen long ago; the pulse heard a minute ago."""
    base = NodeState("open", True, -timedelta(hours=1), True, (), -timedelta(minutes=1), timedelta(0), {}, True)
    return NodeState(**{**vars(base), **changes})


def test_the_statement_follows_the_rules(pool):
    node, _ = make_node(pool, "me")
    node_id, token_hash = node.id, node.agent_token_hash
    interval = timedelta(seconds=heartbeat_seconds())
    gap = timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(state=states())
    # The boundaries, whatever hypothesis draws: last_seen_at due exactly at one interval, not a microsecond under.
    @example(state=_state(last_seen=-interval))
    @example(state=_state(last_seen=-interval + TICK))
    @example(state=_state(last_seen=TICK, pulse=None))
    @example(state=_state(same_protocol=False, last_seen=-TICK))
    # The pulse: heard within its second (not written), at it (written), at the gap (still listening), before it.
    @example(state=_state(last_seen=-TICK, pulse=-PULSE_EVERY + TICK))
    @example(state=_state(last_seen=-TICK, pulse=-PULSE_EVERY))
    @example(state=_state(pulse=-gap, listening=-timedelta(hours=2)))
    @example(state=_state(pulse=-gap - TICK, listening=-timedelta(hours=2)))
    # Not a plain heartbeat: nothing written, the pulse included.
    @example(state=_state(session="left"))
    @example(state=_state(same_version=False, pulse=None))
    # The watcher: recorded by a write (due), not written for it alone (not due), none asked.
    @example(state=_state(watched_by="b", watcher="a"))
    @example(state=_state(last_seen=-TICK, watched_by="b", watcher="a"))
    @example(state=_state(watched_by="b", watcher=None))
    def same_state(state: NodeState) -> None:
        with transaction.atomic():
            write(state, node_id)
            token = token_hash if state.known_token else "0" * 64
            before = rows_before(node_id)
            by_statement = outcome(agent_heartbeat, token_hash=token, node_id=node_id, watcher=state.watcher)
            transaction.set_rollback(True)
        # An unknown token: nothing answered, nothing written.
        if state.known_token:
            expected = heartbeat_after(node_id, state.spec, before, state.watcher)
        else:
            expected = (None, before[0], before[2])
        session = None if by_statement[1] is None else {k: v for k, v in by_statement[1].items() if k != "id"}
        assert (by_statement[0], session, by_statement[2]) == expected
        report, session, pulse = by_statement
        if report is not None:  # the watcher the session records after the statement, which the caller may trust
            assert session is not None
            assert report.watched_by == session["watched_by"]
            seen.add(("watcher recorded anew", session["watched_by"] != state.watched_by))
        seen.add(("answered", report is not None))
        seen.add(("seen written", session is not None and session["last_seen_at"] == NOW))
        seen.add(("pulse written", pulse is not None and pulse["last_heard_at"] == NOW))
        seen.add(("listening restarted", pulse is not None and pulse["listening_since"] == NOW))
        if state.pulse is None:
            seen.add(("pulse created", pulse is not None))

    seen: set[tuple[str, bool]] = set()
    same_state()
    assert not NodeSession.objects.exists()  # every example rolled its savepoint back
    # Both sides of every rule were reached: the agreement is not that of a statement that never writes.
    assert seen == {(what, done) for what, _ in seen for done in (False, True)}, sorted(seen)


def test_a_wake_s_read_answers_as_the_heartbeat_would_and_writes_nothing(pool):
    """``held_sessions_read`` (a woken held request's read, several in one statement): where it reads a plain
    heartbeat's session, the heartbeat would answer the same spec and commands; where the heartbeat would not be a
    plain one, neither is the read; it writes nothing."""
    node, _ = make_node(pool, "me")
    node_id, token_hash = node.id, node.agent_token_hash

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(state=states())
    @example(state=_state())
    @example(state=_state(session="left"))
    @example(state=_state(same_protocol=False))
    @example(state=_state(known_token=False))
    def same_answer(state: NodeState) -> None:
        with transaction.atomic():
            write(state, node_id)
            token = token_hash if state.known_token else "0" * 64
            before = NodeSession.objects.filter(node_id=node_id).values().first(), FleetPulse.objects.values().first()
            reads = held_sessions_read(token_hashes=[token, "f" * 64])
            after = NodeSession.objects.filter(node_id=node_id).values().first(), FleetPulse.objects.values().first()
            heartbeat, _, _ = outcome(agent_heartbeat, token_hash=token, node_id=node_id)
            transaction.set_rollback(True)
        assert after == before
        if state.known_token and state.session != "none":  # the watcher as the session records it
            assert reads[token].report.watched_by == state.watched_by
        assert set(reads) == ({token} if state.known_token else set())
        read = reads.get(token)
        plain = read is not None and read.is_plain_heartbeat(VERSION, PROTOCOL)
        seen.add(plain)
        if plain:
            assert read is not None
            assert heartbeat is not None
            assert (read.node_id, read.report.node_id) == (node_id, heartbeat.node_id)
            assert (read.report.spec, read.report.commands) == (heartbeat.spec, heartbeat.commands)
            assert read.report.spec_revision == heartbeat.spec_revision
        if heartbeat is None:
            assert not plain

    seen: set[bool] = set()
    same_answer()
    assert seen == {False, True}


def test_the_held_nodes_touch_writes_the_sessions_that_are_due_or_watched_by_another(pool):
    """``held_sessions_touch``: open sessions of the given nodes whose last_seen_at is due (about half an interval
    old) or ahead of now, or that record another watcher than the process touching them, in one statement (an array
    of ids); each one written then records that process as its watcher."""
    due = NOW - timedelta(seconds=touched_within())
    cases = {
        "due": (due, None, "a"), "fresh": (due + TICK, None, "a"), "ahead": (NOW + TICK, None, "a"),
        "left": (due, NOW, "b"), "fresh, watched by another": (due + TICK, None, "b"),
        "fresh, watched by none": (due + TICK, None, None),
    }  # fmt: skip
    nodes = {name: make_node(pool, name)[0] for name in [*cases, "not held"]}
    for name, (last_seen_at, left_at, watched_by) in [*cases.items(), ("not held", (due, None, "b"))]:
        NodeSession.objects.create(
            node=nodes[name], daemon_version=VERSION, protocol_version=PROTOCOL, joined_at=NOW - timedelta(hours=1),
            last_seen_at=last_seen_at, left_at=left_at, watched_by=watched_by,
        )  # fmt: skip
    held = [nodes[name].id for name in cases]

    def written(touch) -> set[str]:
        with transaction.atomic():
            touch()
            names = set(NodeSession.objects.filter(last_seen_at=NOW).values_list("node__name", flat=True))
            transaction.set_rollback(True)
        return names

    def watchers(touch) -> dict[str, str | None]:
        with transaction.atomic():
            touch()
            rows = dict(NodeSession.objects.values_list("node__name", "watched_by"))
            transaction.set_rollback(True)
        return rows

    assert written(lambda: held_sessions_touch(node_ids=held, now=NOW, watcher="a")) == {
        "due", "ahead", "fresh, watched by another", "fresh, watched by none",
    }  # fmt: skip
    recorded = watchers(lambda: held_sessions_touch(node_ids=held, now=NOW, watcher="a"))
    assert recorded == {**{name: "a" for name in cases}, "left": "b", "not held": "b"}
    # Without a watcher (a caller that keeps no reads): the watchers stay, and only the due are written.
    assert watchers(lambda: held_sessions_touch(node_ids=held, now=NOW)) == {
        name: watched_by for name, (_, _, watched_by) in [*cases.items(), ("not held", (due, None, "b"))]
    }

    assert written(lambda: held_sessions_touch(node_ids=held, now=NOW)) == {"due", "ahead"}  # no watcher: the due
