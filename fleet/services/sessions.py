"""Agent sessions: join, heartbeat, leave. The hot path of a large fleet.

A plain heartbeat (the session is open and the agent reports the version it
already had) is one conditional UPDATE; with the token lookup and the pending
commands that is three queries per heartbeat, whatever the fleet's size.

A join (no session yet, or the agent left) or a version change takes the
slow path: it locks the session row, records the new state, completes the
node's daemon.upgrade commands to that version (self-terminating), and sends
``fleet.plugins.node_session_reported`` after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.models import Node, NodeSession
from fleet.plugins import node_session_reported
from fleet.services.commands import commands_complete_upgrade, commands_pending
from fleet.services.liveness import pulse_heard
from fleet.services.nodes import heartbeat_seconds, node_session

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SessionReport:
    """What the agent gets back: its desired state and pending commands."""

    spec: dict[str, Any]
    commands: list[dict[str, Any]]
    heartbeat_seconds: int
    joined: bool


def agent_session_report(
    *, node: Node, daemon_version: str, protocol_version: int, now: datetime | None = None
) -> SessionReport:
    """Join or heartbeat for ``node`` (loaded with select_related("session"))."""
    now = now or timezone.now()
    session = node_session(node)
    heartbeat = session is not None and session.left_at is None and session.daemon_version == daemon_version
    # Conditional: if a leave or another version slipped in since the token lookup, take the join path.
    if not (
        heartbeat
        and NodeSession.objects.filter(node_id=node.id, left_at__isnull=True, daemon_version=daemon_version).update(
            last_seen_at=now, protocol_version=protocol_version
        )
    ):
        _session_join(node_id=node.id, daemon_version=daemon_version, protocol_version=protocol_version, now=now)
        heartbeat = False
    pulse_heard(now=now)
    return SessionReport(
        spec=node.spec,
        commands=commands_pending(node_id=node.id),
        heartbeat_seconds=heartbeat_seconds(),
        joined=not heartbeat,
    )


@transaction.atomic
def _session_join(*, node_id: UUID, daemon_version: str, protocol_version: int, now: datetime) -> None:
    session = NodeSession.objects.select_for_update().filter(node_id=node_id).first()
    if session is None:
        try:
            with transaction.atomic():
                NodeSession.objects.create(
                    node_id=node_id,
                    daemon_version=daemon_version,
                    protocol_version=protocol_version,
                    joined_at=now,
                    last_seen_at=now,
                )
            previous_version = None
        except IntegrityError:
            # Two first joins at once: the other one created it; lock it and go on as a rejoin.
            session = NodeSession.objects.select_for_update().get(node_id=node_id)
    if session is not None:
        joined = session.left_at is not None
        previous_version = session.daemon_version
        if not joined and previous_version == daemon_version:
            # A concurrent request already recorded this; it is a heartbeat now.
            NodeSession.objects.filter(pk=session.pk).update(last_seen_at=now, protocol_version=protocol_version)
            return
        NodeSession.objects.filter(pk=session.pk).update(
            daemon_version=daemon_version,
            protocol_version=protocol_version,
            joined_at=now,
            last_seen_at=now,
            left_at=None,
        )
    done = commands_complete_upgrade(node_id=node_id, version=daemon_version, now=now)
    log.info(
        "fleet.session.reported",
        node_id=str(node_id),
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        previous_version=previous_version,
        upgrade_commands_done=done,
    )
    transaction.on_commit(
        lambda: _send_reported(
            node_id=node_id,
            daemon_version=daemon_version,
            protocol_version=protocol_version,
            previous_version=previous_version,
        )
    )


def _send_reported(*, node_id: UUID, daemon_version: str, protocol_version: int, previous_version: str | None) -> None:
    # The session is committed whatever a receiver does: a failing receiver is logged, not the agent's problem
    # (the rollout controller's periodic tick settles what a lost notification would have).
    for receiver, result in node_session_reported.send_robust(
        sender=NodeSession,
        node_id=node_id,
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        previous_version=previous_version,
    ):
        if isinstance(result, Exception):
            log.error(
                "fleet.session.receiver_failed",
                receiver=getattr(receiver, "__qualname__", repr(receiver)),
                error=repr(result),
                node_id=str(node_id),
            )


def agent_session_leave(*, node: Node, now: datetime | None = None) -> bool:
    """The agent is going down: the node is offline until it joins again. Idempotent; one UPDATE."""
    return bool(NodeSession.objects.filter(node_id=node.id, left_at__isnull=True).update(left_at=now or timezone.now()))
