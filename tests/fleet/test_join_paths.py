"""The join's one statement against its rules (tests/fleet/session_rules.py restates them).

``agent_session_report_for_token`` (and ``agent_session_report``, the DRF view's, for a node already loaded) runs
``join_sql`` (fleet/services/session_statements.py). Hypothesis draws a node's state around every rule of a join
(no session, an open one on the reported version or another, a left one; ``last_seen_at`` due or not; the protocol
version the same or changed; open and settled daemon.upgrade commands to the reported version and to others; the
fleet pulse missing, heard, at the gap) and runs the statement on it in a savepoint rolled back afterwards. Its
outcome must be what the rules say: the report (or None), the session row, the commands, the pulse and the
plug-ins' notice.
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
from fleet.plugins import node_session_reported
from fleet.services import liveness
from fleet.services.liveness import GAP_HEARTBEATS
from fleet.services.nodes import heartbeat_seconds
from fleet.services.sessions import agent_session_leave_for_token, agent_session_report_for_token
from tests.fleet.conftest import make_node
from tests.fleet.node_states import NOW, PROTOCOL, TICK, VERSION, write_node_state
from tests.fleet.session_rules import join_after, rows_before

pytestmark = pytest.mark.django_db(transaction=False)


@dataclass(frozen=True)
class JoinState:
    session: str  # "none", "open" or "left"
    same_version: bool
    last_seen: timedelta  # last_seen_at - NOW
    same_protocol: bool
    commands: tuple[tuple[str, bool, int], ...]  # (state, to the reported version, seconds after NOW - 1 h)
    pulse: timedelta | None  # last_heard_at - NOW; None: no pulse row yet
    spec: dict[str, Any]
    known_token: bool
    watched_by: str | None = None  # the web process the session records as its watcher
    watcher: str | None = None  # the one the call asks to record (the async front's, for a watching agent)


def states() -> st.SearchStrategy[JoinState]:
    interval = timedelta(seconds=heartbeat_seconds())
    gap = timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())
    boundaries = [-timedelta(hours=1), -interval, timedelta(0), timedelta(seconds=5)]
    exact = [moment + shift for moment in boundaries for shift in (-TICK, timedelta(0), TICK)]
    return st.builds(
        JoinState,
        session=st.sampled_from(["left", "left", "open", "none"]),
        same_version=st.booleans(),
        last_seen=st.sampled_from(exact),
        same_protocol=st.booleans(),
        commands=st.lists(
            st.tuples(st.sampled_from(Command.State.values), st.booleans(), st.integers(0, 2)), max_size=4
        ).map(tuple),
        pulse=st.none() | st.sampled_from([-timedelta(hours=1), -gap - TICK, -timedelta(seconds=1), timedelta(0)]),
        spec=st.sampled_from([{"daemon": None}, {"daemon": {"version": VERSION, "sha256": "c" * 64}}]),
        known_token=st.booleans() | st.just(True),
        watched_by=st.sampled_from([None, "a", "b"]),
        watcher=st.sampled_from([None, "a"]),
    )


def write(state: JoinState, node_id: UUID) -> None:
    commands = [
        (command_state, VERSION if to_reported else f"2.{n}.0", seconds)
        for n, (command_state, to_reported, seconds) in enumerate(state.commands)
    ]
    write_node_state(
        node_id, spec=state.spec, session=state.session, same_version=state.same_version,
        same_protocol=state.same_protocol, last_seen=state.last_seen, commands=commands, pulse=state.pulse,
        listening=-timedelta(hours=2), watched_by=state.watched_by,
    )  # fmt: skip


def outcome(path, *, token_hash: str, node_id: UUID, capture, watcher: str | None = None) -> tuple[Any, ...]:
    """What ``path`` answers, leaves written and tells the plug-ins, rolled back afterwards."""
    liveness._last_written_at = None  # the rule is the database's; the process's throttle only skips queries
    notices: list[dict[str, Any]] = []

    def heard(**kwargs: Any) -> None:
        notices.append({key: kwargs[key] for key in ("node_id", "daemon_version", "protocol_version")})

    node_session_reported.connect(heard, dispatch_uid="test_join_paths")
    try:
        with transaction.atomic(), capture(execute=True):
            report = path(
                token_hash=token_hash, daemon_version=VERSION, protocol_version=PROTOCOL, now=NOW, watcher=watcher
            )
            session = NodeSession.objects.filter(node_id=node_id).values().first()
            if session is not None:
                del session["id"]  # a first session's id comes from a sequence that savepoints do not roll back
            commands = list(Command.objects.filter(node_id=node_id).order_by("id").values("state", "completed_at"))
            pulse = FleetPulse.objects.values("last_heard_at", "listening_since").first()
            transaction.set_rollback(True)
    finally:
        node_session_reported.disconnect(dispatch_uid="test_join_paths")
    return report, session, commands, pulse, notices


def _id(command: dict[str, Any]) -> Any:
    return command["id"]


def _state(**changes: Any) -> JoinState:
    """A left session on the reported version; the pulse heard a minute ago."""
    base = JoinState("left", True, -timedelta(minutes=1), True, (), -timedelta(minutes=1), {}, True)
    return JoinState(**{**vars(base), **changes})


def test_the_statement_follows_the_rules(pool, django_capture_on_commit_callbacks):
    node, _ = make_node(pool, "me")
    node_id, token_hash = node.id, node.agent_token_hash
    interval = timedelta(seconds=heartbeat_seconds())

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(state=states())
    @example(state=_state(session="none", pulse=None))
    @example(state=_state(session="open", same_version=False, commands=(("pending", True, 0), ("acked", True, 1))))
    @example(state=_state(commands=(("pending", True, 0), ("pending", False, 0), ("done", True, 1))))
    # An open session on the reported version (a concurrent join recorded it): a heartbeat, coalesced or not.
    @example(state=_state(session="open", last_seen=-interval + TICK))
    @example(state=_state(session="open", last_seen=-interval))
    @example(state=_state(session="open", last_seen=-TICK, same_protocol=False, commands=(("pending", True, 0),)))
    # The watcher: recorded by a join, not by a heartbeat not due (nothing written), on a first session.
    @example(state=_state(watched_by="b", watcher="a"))
    @example(state=_state(session="open", last_seen=-TICK, watched_by="b", watcher="a"))
    @example(state=_state(session="none", watcher="a"))
    def same_state(state: JoinState) -> None:
        with transaction.atomic():
            write(state, node_id)
            token = token_hash if state.known_token else "0" * 64
            kwargs = {"token_hash": token, "node_id": node_id, "capture": django_capture_on_commit_callbacks}
            before = rows_before(node_id)
            by_statement = outcome(agent_session_report_for_token, watcher=state.watcher, **kwargs)
            transaction.set_rollback(True)
        if state.known_token:
            expected = join_after(node_id, state.spec, before, state.watcher)
        else:  # an unknown token: nothing answered, nothing written, nobody told
            unchanged = [{"state": c["state"], "completed_at": c["completed_at"]} for c in sorted(before[1], key=_id)]
            expected = (None, before[0], unchanged, before[2], [])
        assert by_statement == expected
        report, session, commands, _, notices = by_statement
        if report is not None:  # the watcher the session records after the statement, which the caller may trust
            assert session is not None
            assert report.watched_by == session["watched_by"]
            seen.add(("watcher recorded anew", session["watched_by"] != state.watched_by))
        seen.add(("answered", report is not None))
        seen.add(("joined", report is not None and report.joined))
        seen.add(("notified", bool(notices)))
        seen.add(("seen written", session is not None and session["last_seen_at"] == NOW))
        seen.add(("command done", any(command["completed_at"] == NOW for command in commands)))
        seen.add(("pending answered", report is not None and bool(report.commands)))

    seen: set[tuple[str, bool]] = set()
    same_state()
    assert not NodeSession.objects.exists()  # every example rolled its savepoint back
    # Both sides of every rule were reached: the agreement is not that of a statement that never writes.
    assert seen == {(what, done) for what, _ in seen for done in (False, True)}, sorted(seen)


@pytest.mark.parametrize("session", ["open", "left", "none", "unknown token"])
def test_a_leave_is_one_statement(pool, session, django_assert_num_queries):
    """``agent_session_leave_for_token``: None for an unknown token, else whether an open session was closed."""
    node, _ = make_node(pool, "me")
    if session != "none":
        write(_state(session="left" if session == "left" else "open", pulse=None), node.id)
    token = "0" * 64 if session == "unknown token" else node.agent_token_hash

    def leave(path):
        with transaction.atomic():
            answer = path(token_hash=token, now=NOW)
            left_at = NodeSession.objects.filter(node=node).values_list("left_at", flat=True).first()
            transaction.set_rollback(True)
        return answer, left_at

    with transaction.atomic():
        with django_assert_num_queries(1):
            agent_session_leave_for_token(token_hash=token, now=NOW)
        transaction.set_rollback(True)
    answer, left_at = leave(agent_session_leave_for_token)
    assert answer is {"open": True, "left": False, "none": False, "unknown token": None}[session]
    # An open session is closed now; a left one keeps when it left; none stays none.
    assert left_at == {"open": NOW, "left": NOW - timedelta(minutes=1), "none": None, "unknown token": None}[session]
