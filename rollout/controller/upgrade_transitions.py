"""Every state transition of a node upgrade: one function each, and nowhere else.

```
NodeUpgrade  pending ──start_upgrades──► in_flight ──succeed_upgrades──► succeeded
             in_flight ──succeed_rejoined──► succeeded    (in the join's own statement)
             in_flight ──mark_arrived──► in_flight (arrived_at: proving readiness, minReadySeconds > 0)
             in_flight ──fail_and_send_back──► failed        (spec.daemon back to what it ran; timeout, not_ready)
             in_flight ──roll_back_upgrades──► rolled_back   (spec.daemon back to what it ran)
             pending ──skip_upgrades──► skipped      pending ──cancel_pending_upgrades──► cancelled
             in_flight ──hand_over_upgrades──► cancelled (superseded: a superseding rollout takes the node on)
             skipped (offline, completed rollout) ──converge_upgrades──► in_flight   (convergence after completion)
```

Each function does the whole transition together: the conditional UPDATE
(``filter(state=<from>)``, so a tick repeated after a crash, a timeout task
delivered twice or the agent's join path racing a tick moves a row at most
once), the ``claims_node`` change (the one-writer flag), and the structured
log line. Callers (the controller's tick, the operator actions, the agent's
join hook) only decide *which* rows move. The rollout's own transitions are
rollout/controller/transitions.py.

``claims_node``: a row is its node's one writer while its rollout is active or
paused, or while the row itself is in flight (an aborted rollout's in-flight
nodes keep their node until they settle).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

import structlog
from django.db.models import Exists, OuterRef, Subquery

from core.statements import NamedRows, prepared_cursor
from fleet.interface import NodeSession
from rollout.controller.daemons import SendBack, previous_daemon, send_back
from rollout.controller.statements import SETTLE_ON_JOIN_PARAMS, SUCCEED_REJOINED_SQL, SettleOnJoin
from rollout.models import NodeUpgrade, Rollout
from rollout.models.querysets import sessions_on_target

log = structlog.get_logger("rollout")

#: ``SUCCEED_REJOINED_SQL``'s row, read by column name.
_ROWS = NamedRows()

State = NodeUpgrade.State
#: Nodes named per ``node_upgrade.started`` log line.
STARTED_LOG_BATCH = 200


def claims_node(rollout_state: str) -> bool:
    """Whether a settled row still holds its node: while its rollout is active or paused."""
    return rollout_state in Rollout.ACTIVE_STATES


def start_upgrades(
    *, rollout: Rollout, starts: Sequence[tuple[int, UUID]], started_at: datetime, deadline: datetime
) -> int:
    """pending -> in_flight in one set-based UPDATE, recording what each node ran before.

    ``starts``: (node upgrade id, node id) pairs. The previous section and
    version are read from the node and its session by the UPDATE itself (before
    spec.daemon changes), not sent row by row. The caller sets the nodes'
    spec.daemon after this.
    """
    started = NodeUpgrade.objects.filter(id__in=[pk for pk, _ in starts], state=State.PENDING).update(
        state=State.IN_FLIGHT,
        started_at=started_at,
        deadline=deadline,
        previous_daemon=previous_daemon(),
        previous_version=Subquery(NodeSession.objects.filter(node_id=OuterRef("node_id")).values("daemon_version")[:1]),
    )
    # One line per batch of nodes, not per node: a tick that starts 5,000 nodes spent a second formatting
    # 5,000 lines (docs/architecture.md#scale-targets: at most 1.5 s). Each line names its nodes, so a node's
    # start is still found.
    node_ids = [str(node_id) for _, node_id in starts]
    for first in range(0, len(node_ids), STARTED_LOG_BATCH):
        log.info(
            "node_upgrade.started",
            tenant=rollout.tenant_id,
            rollout=str(rollout.id),
            nodes=node_ids[first : first + STARTED_LOG_BATCH],
            version=rollout.release.version,
            wave=rollout.current_wave,
            deadline=deadline.isoformat(),
        )
    return started


def mark_arrived(*, ids: Sequence[int], **context: str | int) -> int:
    """in_flight, arrived_at recorded: the node rejoined on the target and now proves readiness.

    See docs/controller.md#readiness-before-success-minreadyseconds.

    ``arrived_at`` is the session's ``joined_at`` (when it rejoined on the target), read by the
    UPDATE itself, and only while that session is still open on the target: a later rejoin gives a
    later ``joined_at``, which is how readiness tells the node left meanwhile.
    """
    on_target = sessions_on_target()
    arrived = (
        NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT, arrived_at__isnull=True)
        .filter(Exists(on_target))
        .update(arrived_at=Subquery(on_target.values("joined_at")[:1]))
    )
    if arrived:
        log.info("node_upgrade.arrived", count=arrived, **context)
    return arrived


def converge_upgrades(
    *, rollout_id: UUID, starts: Sequence[tuple[int, UUID]], started_at: datetime, deadline: datetime
) -> int:
    """skipped (offline) -> in_flight: a completed rollout's node came back on an older version.

    See docs/controller.md#convergence-after-completion.

    Like ``start_upgrades``: the previous section and version are read by the UPDATE; the row takes
    its node again (``claims_node``) while in flight, so the one-writer index refuses it when another
    rollout holds the node (IntegrityError: the caller retries without it).
    """
    started = NodeUpgrade.objects.filter(
        id__in=[pk for pk, _ in starts],
        state=State.SKIPPED,
        reason=NodeUpgrade.Reason.OFFLINE,
        rollout__state=Rollout.State.COMPLETED,
    ).update(
        state=State.IN_FLIGHT,
        claims_node=True,
        reason=None,
        settled_at=None,
        arrived_at=None,
        started_at=started_at,
        deadline=deadline,
        previous_daemon=previous_daemon(),
        previous_version=Subquery(NodeSession.objects.filter(node_id=OuterRef("node_id")).values("daemon_version")[:1]),
    )
    for _, node_id in starts:
        log.info("node_upgrade.converging", rollout=str(rollout_id), node=str(node_id))
    return started


def skip_upgrades(*, rollout: Rollout, ids: Sequence[int], reason: str, at: datetime) -> int:
    """pending -> skipped (offline agent, no binary for the arch). The row keeps its node while the rollout runs."""
    skipped = NodeUpgrade.objects.filter(id__in=ids, state=State.PENDING).update(
        state=State.SKIPPED, reason=reason, settled_at=at
    )
    if skipped:
        log.info(
            "node_upgrade.skipped", tenant=rollout.tenant_id, rollout=str(rollout.id), count=skipped, reason=reason
        )
    return skipped


def succeed_upgrades(*, ids: Sequence[int], rollout_state: str, at: datetime, **context: str | int) -> int:
    """in_flight -> succeeded: the agent rejoined reporting the target version."""
    succeeded = NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT).update(
        state=State.SUCCEEDED, settled_at=at, claims_node=claims_node(rollout_state)
    )
    if succeeded:
        log.info("node_upgrade.succeeded", count=succeeded, **context)
    return succeeded


@dataclass(frozen=True)
class Rejoined:
    """A rejoined node's upgrade that ``succeed_rejoined`` settled."""

    rollout_id: UUID
    #: A tick of the rollout is queued and waits for this settle's commit to start: asking again is not needed.
    tick_queued: bool


@dataclass(frozen=True)
class HeldByTick:
    """A rejoined node's upgrade that ``succeed_rejoined`` left alone: a tick holds its row locked."""

    rollout_id: UUID


def succeed_rejoined(
    *, node_id: UUID, version: str, at: datetime, row: SettleOnJoin | None = None
) -> Rejoined | HeldByTick | Literal[False] | None:
    """in_flight -> succeeded: the node's agent rejoined reporting ``version``, its target; PostgreSQL only.

    The settled upgrade; False, and nothing written, when no upgrade of the node is in flight; its rollout, and
    nothing written, when a tick holds the row; None, and nothing written, for every other case but the common one
    (controller/statements.py): the caller decides those. ``row``: the statement's columns as the join's own
    statement ran them, committed (``SettleOnJoin``, rollout/hooks.py): then it does not run again.
    """
    if row is None:
        with prepared_cursor() as cursor:
            cursor.execute(
                SUCCEED_REJOINED_SQL, {**SETTLE_ON_JOIN_PARAMS, "node": node_id, "version": version, "now": at}
            )
            (row,) = _ROWS.read(SUCCEED_REJOINED_SQL, cursor.description, cursor.fetchone(), (SettleOnJoin,))
    if row.rollout_settled_id is None:
        if row.rollout_held_by_tick is not None:
            return HeldByTick(rollout_id=row.rollout_held_by_tick)
        return None if row.rollout_in_flight else False
    log.info(
        "node_upgrade.succeeded",
        count=1,
        tenant=row.rollout_tenant_id,
        rollout=str(row.rollout_settled_id),
        node=str(node_id),
        version=version,
    )
    return Rejoined(rollout_id=row.rollout_settled_id, tick_queued=row.rollout_tick_queued)


def fail_and_send_back(*, rows: Sequence[SendBack], reason: str, at: datetime) -> int:
    """in_flight -> failed, and each node's spec.daemon goes back to what it ran before.

    ``rows`` were read under their row locks by the caller. Back to the previous
    section when that release is registered, else the registered release its
    agent reported when the upgrade started, else literally the previous
    section (possibly none): a failed node must not keep chasing the version it
    could not reach.
    """
    failed = 0
    for claims in (True, False):
        ids = [row.id for row in rows if claims_node(row.rollout_state) == claims]
        if ids:
            failed += NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT).update(
                state=State.FAILED, reason=reason, settled_at=at, claims_node=claims
            )
    if failed:
        send_back(rows, fallback_to_previous=True)
        for row in rows:
            log.info(
                "node_upgrade.failed",
                tenant=row.tenant_id,
                rollout=str(row.rollout_id),
                node=str(row.node_id),
                reason=reason,
            )
    return failed


def roll_back_upgrades(*, rows: Sequence[SendBack], at: datetime) -> int:
    """in_flight -> rolled_back: each node goes back to its previous (registered) release.

    ``rows`` were read under their row locks and each has a registered section
    to go back to (``SendBack.section``); the rows stop holding their node.
    """
    rolled_back = NodeUpgrade.objects.filter(id__in=[row.id for row in rows], state=State.IN_FLIGHT).update(
        state=State.ROLLED_BACK, reason=NodeUpgrade.Reason.ROLLED_BACK, settled_at=at, claims_node=False
    )
    if rolled_back:
        send_back(rows, fallback_to_previous=False)
        for row in rows:
            log.info(
                "node_upgrade.rolled_back", tenant=row.tenant_id, rollout=str(row.rollout_id), node=str(row.node_id)
            )
    return rolled_back


def keep_in_flight(*, ids: Sequence[int], reason: str) -> int:
    """Not a transition: in-flight rows that abort could not roll back say why (they settle as usual)."""
    return NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT).update(reason=reason)


def cancel_pending_upgrades(*, rollout: Rollout, at: datetime, reason: str = NodeUpgrade.Reason.ABORTED) -> int:
    """pending -> cancelled (abort; deny: ``denied``): the rows stop holding their node."""
    cancelled = NodeUpgrade.objects.filter(rollout=rollout, state=State.PENDING).update(
        state=State.CANCELLED, reason=reason, settled_at=at, claims_node=False
    )
    if cancelled:
        log.info("node_upgrade.cancelled", tenant=rollout.tenant_id, rollout=str(rollout.id), count=cancelled)
    return cancelled


def supersede_upgrades(*, tenant_id: int, node_ids: AbstractSet[UUID], at: datetime) -> int:
    """in_flight (of a finished rollout) -> cancelled (``superseded``): a new rollout takes the node.

    An aborted rollout's in-flight nodes keep their node only until a newer
    rollout needs it (a fix-forward), and so does a completed rollout's node
    converging after completion (docs/controller.md#convergence-after-completion). They are not sent back: the new
    rollout sets the node's spec.daemon when it starts it.

    The rows are found from the in-flight side (the tenant's finished rollouts' in-flight rows,
    which the pools' budgets keep few) and matched against ``node_ids`` here: a rollout over
    100,000 nodes would otherwise send them all as parameters (docs/benchmarks.md).
    """
    candidates = NodeUpgrade.objects.filter(
        state=State.IN_FLIGHT, rollout__tenant_id=tenant_id, rollout__state__in=Rollout.TERMINAL_STATES
    )
    ids = [pk for pk, node_id in candidates.values_list("id", "node_id") if node_id in node_ids]
    if not ids:
        return 0
    # A row settled since it was read is left alone. A rollout that finishes meanwhile keeps its
    # in-flight rows' claims: the caller's insert then meets them at the one-writer index (a 409).
    superseded = NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT).update(
        state=State.CANCELLED, reason=NodeUpgrade.Reason.SUPERSEDED, settled_at=at, claims_node=False
    )
    if superseded:
        log.info("node_upgrade.superseded", count=superseded)
    return superseded


def hand_over_upgrades(*, rollout: Rollout, node_ids: AbstractSet[UUID], at: datetime) -> list[UUID]:
    """in_flight -> cancelled (``superseded``) for the rows of ``rollout`` (being superseded) whose node the
    superseding rollout's snapshot holds: they drop their claim and are not sent back
    (docs/controller.md#undoing-a-bad-release).

    The rows are read under their row locks (the join path settling one meanwhile waits, then finds it
    cancelled); returns their nodes. Rows outside ``node_ids`` stay in flight and settle in ``rollout``.
    """
    locked = NodeUpgrade.objects.select_for_update().filter(rollout=rollout, state=State.IN_FLIGHT)
    ids = {pk: node_id for pk, node_id in locked.values_list("id", "node_id") if node_id in node_ids}
    if not ids:
        return []
    NodeUpgrade.objects.filter(id__in=list(ids), state=State.IN_FLIGHT).update(
        state=State.CANCELLED, reason=NodeUpgrade.Reason.SUPERSEDED, settled_at=at, claims_node=False
    )
    log.info("node_upgrade.handed_over", tenant=rollout.tenant_id, rollout=str(rollout.id), count=len(ids))
    return list(ids.values())


def release_settled_claims(*, rollout: Rollout | None = None) -> int:
    """Settled rows of finished rollouts stop holding their node; in-flight rows hold it until they settle.

    Without ``rollout``: every finished rollout's (repairs a join-path race that
    settled a row with the claim of a rollout finishing at the same moment).
    """
    rows = NodeUpgrade.objects.filter(claims_node=True).exclude(state=State.IN_FLIGHT)
    if rollout is not None:
        rows = rows.filter(rollout=rollout)
    else:
        rows = rows.filter(rollout__state__in=Rollout.TERMINAL_STATES)
    return rows.update(claims_node=False)
