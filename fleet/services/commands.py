"""Commands for node agents: delivered with every heartbeat while pending.

Transitions (see Command's docstring), each a conditional update:
pending -> acked | failed          by the agent's ack (``command_ack``)
pending | acked -> done            self-terminating kinds, when the agent rejoins
                                   on the payload's version (the join's statement,
                                   fleet/services/session_statements.py ``join_sql``)
pending | acked -> cancelled       superseded by a newer command of the same
                                   superseding kind for the node (``commands_enqueue``),
                                   or withdrawn by a plug-in (``commands_cancel``)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput, NotFound
from fleet.models import Command

OPEN_STATES = (Command.State.PENDING, Command.State.ACKED)
# Only the newest command of these kinds matters: an older one for the same node is cancelled.
SUPERSEDING_KINDS = frozenset({Command.Kind.DAEMON_UPGRADE})
ERROR_MAX = 4000


def command_enqueue(*, node_id: UUID, kind: str, payload: dict[str, Any]) -> Command:
    """One command for one node (supersedes the node's open command of the same superseding kind)."""
    return _enqueue([(node_id, payload)], kind)[0]


def commands_enqueue(*, node_ids_payloads: Sequence[tuple[UUID, dict[str, Any]]], kind: str) -> int:
    """Commands of ``kind`` for many nodes: one bulk INSERT (plus, for a superseding kind such as
    daemon.upgrade, one UPDATE that cancels those nodes' older open commands). Returns how many were created.
    """
    return len(_enqueue(list(node_ids_payloads), kind))


@transaction.atomic
def _enqueue(rows: list[tuple[UUID, dict[str, Any]]], kind: str) -> list[Command]:
    if kind not in Command.Kind.values:
        raise InvalidInput(f"Unknown command kind {kind!r}.", code="invalid_kind")
    if not rows:
        return []
    now = timezone.now()
    if kind in SUPERSEDING_KINDS:
        Command.objects.filter(node_id__in=[node_id for node_id, _ in rows], kind=kind, state__in=OPEN_STATES).update(
            state=Command.State.CANCELLED, completed_at=now
        )
    return Command.objects.bulk_create(
        [Command(node_id=node_id, kind=kind, payload=payload, created_at=now) for node_id, payload in rows]
    )


def commands_cancel(*, node_ids: Sequence[UUID], kind: str) -> int:
    """Withdraw these nodes' open commands of ``kind`` (pending | acked -> cancelled). One UPDATE; returns how many.

    The rollout module withdraws a ``daemon.upgrade`` when it sends a node back (the node is no
    longer to run that version).
    """
    if kind not in Command.Kind.values:
        raise InvalidInput(f"Unknown command kind {kind!r}.", code="invalid_kind")
    if not node_ids:
        return 0
    return Command.objects.filter(node_id__in=list(node_ids), kind=kind, state__in=OPEN_STATES).update(
        state=Command.State.CANCELLED, completed_at=timezone.now()
    )


def command_ack(*, node_id: UUID, command_id: UUID, ok: bool, error: str = "") -> Command:
    """The agent of ``node_id`` acknowledges its command. Idempotent: acking again changes nothing.

    Another node's command is 404, as an unknown one.
    """
    error = (error or "")[:ERROR_MAX]
    state = Command.State.ACKED if ok else Command.State.FAILED
    Command.objects.filter(pk=command_id, node_id=node_id, state=Command.State.PENDING).update(
        state=state, error="" if ok else error, acked_at=timezone.now()
    )
    command = Command.objects.filter(pk=command_id, node_id=node_id).first()
    if command is None:
        raise NotFound(f"No command {command_id} for this node.", code="not_found")
    return command


def commands_pending(*, node_id: UUID) -> list[dict[str, Any]]:
    """What a heartbeat delivers: the node's pending commands, oldest first (one query)."""
    return [
        {"id": str(row["id"]), "kind": row["kind"], "payload": row["payload"]}
        for row in Command.objects.filter(node_id=node_id, state=Command.State.PENDING)
        .order_by("created_at", "id")
        .values("id", "kind", "payload")
    ]
