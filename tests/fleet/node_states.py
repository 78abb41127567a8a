"""A node's session, commands and fleet pulse written from a drawn state: the ground on which the path-equivalence
tests (test_heartbeat_paths.py, test_join_paths.py) run a session statement and its ORM path."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from fleet.models import Command, FleetPulse, Node, NodeSession

NOW = datetime(2031, 3, 5, 12, 0, tzinfo=UTC)
VERSION, OTHER_VERSION = "1.4.0", "1.3.0"  # the version the agent reports, and another
PROTOCOL = 3
TICK = timedelta(microseconds=1)  # the database's resolution: "just under" a boundary


def write_node_state(
    node_id: UUID,
    *,
    spec: dict[str, Any],
    session: str,
    same_version: bool,
    same_protocol: bool,
    last_seen: timedelta,
    commands: Iterable[tuple[str, str, int]],
    pulse: timedelta | None,
    listening: timedelta,
    watched_by: str | None = None,
) -> None:
    """``session``: "none", "open" or "left"; ``last_seen``: its ``last_seen_at`` - NOW. ``commands``: daemon
    upgrades as (state, the version they upgrade to, seconds after NOW - 1 h), ids 1, 2, ... in that order.
    ``pulse``: the fleet pulse's ``last_heard_at`` - NOW (None: no pulse row); ``listening``: its
    ``listening_since`` - ``last_heard_at``; ``watched_by``: the web process the session records as its watcher."""
    Node.objects.filter(pk=node_id).update(spec=spec)
    if session != "none":
        NodeSession.objects.create(
            node_id=node_id,
            daemon_version=VERSION if same_version else OTHER_VERSION,
            protocol_version=PROTOCOL if same_protocol else PROTOCOL - 1,
            joined_at=NOW - timedelta(hours=2),
            last_seen_at=NOW + last_seen,
            left_at=NOW - timedelta(minutes=1) if session == "left" else None,
            watched_by=watched_by,
        )
    Command.objects.bulk_create(
        Command(
            id=UUID(int=n + 1),
            node_id=node_id,
            kind=Command.Kind.DAEMON_UPGRADE,
            payload={"version": version},
            state=state,
            created_at=NOW - timedelta(hours=1) + timedelta(seconds=seconds),
        )
        for n, (state, version, seconds) in enumerate(commands)
    )
    if pulse is not None:
        heard = NOW + pulse
        FleetPulse.objects.create(pk=1, last_heard_at=heard, listening_since=heard + listening)
