"""The agent session's rules, restated in plain Python over rows as they stood before a call: what a heartbeat, a
join and the fleet pulse must leave written (docs/fleet.md, fleet/services/sessions.py, fleet/services/liveness.py).

test_heartbeat_paths.py and test_join_paths.py hold the one SQL statement of each (fleet/services/session_statements.py)
to these, over generated states: a statement that drifts from a rule fails there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from fleet.models import Command, FleetPulse, NodeSession
from fleet.services.commands import OPEN_STATES
from fleet.services.liveness import GAP_HEARTBEATS, PULSE_EVERY
from fleet.services.nodes import heartbeat_seconds, online_since
from fleet.services.sessions import SessionReport
from tests.fleet.node_states import NOW, PROTOCOL, VERSION

Row = dict[str, Any]


def rows_before(node_id: UUID) -> tuple[Row | None, list[Row], Row | None]:
    """The node's session (without its id), its commands (oldest first) and the fleet pulse, as they stand."""
    session = NodeSession.objects.filter(node_id=node_id).values().first()
    if session is not None:
        del session["id"]
    commands = list(Command.objects.filter(node_id=node_id).order_by("created_at", "id").values())
    pulse = FleetPulse.objects.values("last_heard_at", "listening_since").first()
    return session, commands, pulse


def pulse_after(pulse: Row | None, *, heard: bool) -> Row | None:
    """The pulse: written when heard and last heard at least ``PULSE_EVERY`` ago; a silence past the gap restarts
    ``listening_since``; the first heartbeat ever heard creates it, listening for a whole online window already."""
    if not heard:
        return pulse
    if pulse is None:
        return {"last_heard_at": NOW, "listening_since": online_since(now=NOW)}
    if pulse["last_heard_at"] > NOW - PULSE_EVERY:
        return pulse
    gap = NOW - timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())
    listening = NOW if pulse["last_heard_at"] < gap else pulse["listening_since"]
    return {"last_heard_at": NOW, "listening_since": listening}


def last_seen_due(session: Row, *, within: float | None = None) -> bool:
    """``last_seen_at`` is written when at least one interval old (``within`` seconds for the held nodes' touch),
    or ahead of now."""
    due = NOW - timedelta(seconds=heartbeat_seconds() if within is None else within)
    return session["last_seen_at"] <= due or session["last_seen_at"] > NOW


def is_plain(session: Row | None) -> bool:
    """A plain heartbeat's session: open, on the reported daemon version."""
    return session is not None and session["left_at"] is None and session["daemon_version"] == VERSION


def pending(commands: list[Row], *, done: set[UUID] | frozenset[UUID] = frozenset()) -> list[dict[str, Any]]:
    """What an answer delivers: pending commands oldest first, less those the call completed."""
    return [
        {"id": str(c["id"]), "kind": c["kind"], "payload": c["payload"]}
        for c in commands
        if c["state"] == Command.State.PENDING and c["id"] not in done
    ]


def heartbeat_after(
    node_id: UUID, spec: Any, before: tuple[Row | None, list[Row], Row | None], watcher: str | None = None
) -> tuple[Any, ...]:
    """A plain heartbeat's answer and what it leaves (the report or None, the session, the pulse): nothing at all
    unless the session is plain; its ``last_seen_at`` (and protocol version, and ``watcher``) written when due or
    changed."""
    session, commands, pulse = before
    if not is_plain(session):
        return None, session, pulse
    assert session is not None
    if last_seen_due(session) or session["protocol_version"] != PROTOCOL:  # a write records ``watcher``, if any
        watched_by = watcher or session["watched_by"]
        session = {**session, "last_seen_at": NOW, "protocol_version": PROTOCOL, "watched_by": watched_by}
    report = SessionReport(
        spec=spec, commands=pending(commands), heartbeat_seconds=heartbeat_seconds(), joined=False, node_id=node_id
    )
    return report, session, pulse_after(pulse, heard=True)


def join_after(
    node_id: UUID, spec: Any, before: tuple[Row | None, list[Row], Row | None], watcher: str | None = None
) -> tuple[Any, ...]:
    """A join's answer and what it leaves (the report, the session, the commands' states, the pulse, the plug-ins'
    notices). Not plain (no session, left, another version): a join, the session recorded anew and the open
    daemon.upgrade commands to the reported version done. Plain: a heartbeat, written as a heartbeat is."""
    session, commands, pulse = before
    joined = not is_plain(session)
    if session is None:
        session = {"node_id": node_id, "daemon_version": VERSION, "protocol_version": PROTOCOL, "joined_at": NOW,
                   "last_seen_at": NOW, "left_at": None, "watched_by": watcher}  # fmt: skip
    elif joined or last_seen_due(session) or session["protocol_version"] != PROTOCOL:
        joined_at = NOW if joined else session["joined_at"]
        session = {**session, "daemon_version": VERSION, "protocol_version": PROTOCOL, "joined_at": joined_at,
                   "last_seen_at": NOW, "left_at": None, "watched_by": watcher or session["watched_by"]}  # fmt: skip
    done = {
        c["id"]
        for c in commands
        if joined
        and c["kind"] == Command.Kind.DAEMON_UPGRADE
        and c["state"] in OPEN_STATES
        and c["payload"].get("version") == VERSION
    }
    states = [
        {"state": Command.State.DONE, "completed_at": NOW} if c["id"] in done else
        {"state": c["state"], "completed_at": c["completed_at"]}
        for c in sorted(commands, key=lambda c: c["id"])
    ]  # fmt: skip
    report = SessionReport(
        spec=spec, commands=pending(commands, done=done), heartbeat_seconds=heartbeat_seconds(), joined=joined,
        node_id=node_id,
    )  # fmt: skip
    notices = [{"node_id": node_id, "daemon_version": VERSION, "protocol_version": PROTOCOL}] if joined else []
    return report, session, states, pulse_after(pulse, heard=True), notices
