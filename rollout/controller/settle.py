"""Settling in-flight nodes: on their rejoin, at their deadline, after proving ready, or sent back by abort.

Which rows move is decided here; each move is a function of rollout/controller/upgrade_transitions.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

import structlog
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from fleet.interface import (
    Node,
    offline_verdicts_trusted,
    online_node_q,
)
from rollout.controller.daemons import send_back_rows
from rollout.controller.settle_rules import SETTLE_ORDER, InFlight, Settle, settle_verdict
from rollout.controller.statements import SettleOnJoin
from rollout.controller.tick_requests import rollout_request_tick
from rollout.controller.upgrade_transitions import (
    HeldByTick,
    fail_and_send_back,
    keep_in_flight,
    mark_arrived,
    roll_back_upgrades,
    succeed_rejoined,
    succeed_upgrades,
)
from rollout.models import NodeUpgrade, Rollout
from rollout.models.querysets import sessions_on_target

log = structlog.get_logger("rollout")

State = NodeUpgrade.State


def node_upgrade_settle_reported(*, node_id: UUID, daemon_version: str, row: SettleOnJoin | None = None) -> bool:
    """The agent's join path: a node that rejoins on its target version succeeds at once.

    ``row``: the common case's statement ran inside the join's own (rollout/hooks.py's join step), which has
    committed; these are its columns (``succeed_rejoined``). Without it, that statement runs alone first.

    With minReadySeconds > 0 it records ``arrived_at`` instead. A node already proving
    readiness that joins again (it left meanwhile) or reports another version fails
    (``not_ready``) and goes back. Returns whether the row settled.

    The join never waits for a tick: a row that a tick holds locked (it is settling that node
    itself, or sending it back) is skipped, and another tick is asked for, which settles the
    node if it is still in flight. Waiting would hold the agent's answer, and the web thread that
    serves it, for as long as the tick runs (seconds, when a round starts 500 nodes).

    The tick is asked for once the settle has committed, in a transaction of its own. Asked in the same
    one, a round's joins queued on the ``TickRequest`` row (each held it until its commit), and a settle
    could be missed: the ask found a tick queued, that tick started and read the in-flight rows before
    the settle committed, and nothing asked again. Asked after the commit, a queued tick that it finds
    starts after that commit, so it sees the settle. In the common case a tick is already queued (a round's
    joins come together), and the settle's statement finds it and share-locks its request: that tick's first
    step, clearing the request, waits for the settle's commit, so it sees the settle, and no ask is needed.
    """
    # The common case (no readiness to prove, the row not held by a tick) in one statement; the others below.
    rejoined = succeed_rejoined(node_id=node_id, version=daemon_version, at=timezone.now(), row=row)
    if rejoined is False:  # no upgrade of the node in flight (every join outside a rollout): nothing to settle
        return False
    if isinstance(rejoined, HeldByTick):  # the tick asked for settles it if the holder did not
        rollout_request_tick(rollout_id=rejoined.rollout_id)
        return False
    if rejoined is None:
        return _settle_reported_orm(node_id=node_id, daemon_version=daemon_version)
    if not rejoined.tick_queued:  # a queued tick waited for the settle's commit: it reads it (statements.py)
        rollout_request_tick(rollout_id=rejoined.rollout_id)
    return True


def _settle_reported_orm(*, node_id: UUID, daemon_version: str) -> bool:
    with transaction.atomic():
        settled, tick = _settle_reported(node_id=node_id, daemon_version=daemon_version)
    if tick is not None:  # after the commit (node_upgrade_settle_reported says why)
        rollout_request_tick(rollout_id=tick)
    return settled


def _settle_reported(*, node_id: UUID, daemon_version: str) -> tuple[bool, UUID | None]:
    """Whether the node's in-flight row settled, and the rollout to tick (None: no tick needed)."""
    in_flight = NodeUpgrade.objects.filter(node_id=node_id, state=State.IN_FLIGHT)
    row = in_flight.select_for_update(skip_locked=True, of=("self",)).select_related("rollout").first()
    if row is None:
        return False, in_flight.values_list("rollout_id", flat=True).first()  # locked by a tick, or none
    if row.arrived_at is not None:
        _, failed = node_upgrades_settle_ready(now=timezone.now(), node_id=node_id)
        return bool(failed), row.rollout_id if failed else None
    if row.target_version != daemon_version:
        return False, None
    if row.rollout.min_ready_seconds:
        # Proving readiness: the tick it asks for publishes one tick at the readiness end.
        arrived = mark_arrived(ids=[row.pk], rollout=str(row.rollout_id), node=str(node_id))
        return False, row.rollout_id if arrived else None
    settled = succeed_upgrades(
        ids=[row.pk],
        rollout_state=row.rollout.state,
        at=timezone.now(),
        tenant=row.rollout.tenant_id,
        rollout=str(row.rollout_id),
        node=str(node_id),
        version=daemon_version,
    )
    return bool(settled), row.rollout_id if settled else None


@transaction.atomic
def node_upgrades_settle_overdue(
    *,
    now: datetime,
    rollout: Rollout | None = None,
    rollout_ids: Iterable[UUID | str] | None = None,
    ids: Iterable[int] | None = None,
) -> tuple[int, int]:
    """In-flight nodes past their deadline settle: (succeeded, failed).

    One that the agent already runs succeeds (only its join notice was lost or is
    late: never fail it and send it back); the others time out: they fail and go
    back to what they ran before (``fail_and_send_back``), once the server has
    been hearing its fleet for a whole online window (fleet liveness). Rows
    another worker is settling right now are skipped (``skip_locked``).

    Readiness (minReadySeconds > 0): a node on the target at its deadline records
    ``arrived_at`` instead of succeeding, and a node that arrived is judged by
    readiness only (``node_upgrades_settle_ready``), never by the timeout, even
    when its readiness ends after the deadline.
    """
    queryset = NodeUpgrade.objects.filter(state=State.IN_FLIGHT, deadline__lte=now, arrived_at__isnull=True)
    if rollout is not None:
        queryset = queryset.filter(rollout=rollout)
    if rollout_ids is not None:
        queryset = queryset.filter(rollout_id__in=list(rollout_ids))
    if ids is not None:
        queryset = queryset.filter(id__in=list(ids))
    locked = queryset.select_for_update(skip_locked=True, of=("self",))
    arrived = list(locked.on_target().values_list("id", "rollout__state", "rollout__min_ready_seconds"))
    mark_arrived(ids=[pk for pk, _, ready in arrived if ready])
    succeeded = 0
    for rollout_state in {state for _, state, ready in arrived if not ready}:
        succeeded += succeed_upgrades(
            ids=[pk for pk, state, ready in arrived if state == rollout_state and not ready],
            rollout_state=rollout_state,
            at=now,
        )
    if not offline_verdicts_trusted(now=now):
        # The server was not hearing its fleet a moment ago: an agent may have rejoined on the
        # target meanwhile and not been heard yet. Decide once a whole online window was heard.
        return succeeded, 0
    overdue = send_back_rows(locked.exclude(id__in=[pk for pk, _, _ in arrived]))
    failed = fail_and_send_back(rows=overdue, reason=NodeUpgrade.Reason.TIMEOUT, at=now)
    return succeeded, failed


@transaction.atomic
def node_upgrades_settle_ready(
    *, now: datetime, rollout: Rollout | None = None, node_id: UUID | None = None
) -> tuple[int, int]:
    """Nodes proving readiness settle: (succeeded, failed).

    See docs/controller.md#readiness-before-success-minreadyseconds.

    A node that arrived (``arrived_at``) succeeds once its session has stayed open on the
    target, without rejoining (``joined_at <= arrived_at``) and online, for minReadySeconds.
    One that left, rejoined, reports another version or went offline (the fleet's online
    rule, judged only while the server has been hearing its fleet) fails with ``not_ready``
    and goes back to its previous section, as on a timeout. Until then it stays in flight,
    and so keeps its budget slot.
    """
    queryset = NodeUpgrade.objects.filter(state=State.IN_FLIGHT, arrived_at__isnull=False)
    if rollout is not None:
        queryset = queryset.filter(rollout=rollout)
    if node_id is not None:
        queryset = queryset.filter(node_id=node_id)
    locked = queryset.select_for_update(skip_locked=True, of=("self",))
    still = Exists(sessions_on_target().filter(joined_at__lte=OuterRef("arrived_at")))
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id")))
    rows = list(
        locked.annotate(still=still, online=online).values_list(
            "id", "still", "online", "arrived_at", "rollout__min_ready_seconds", "rollout__state"
        )
    )
    if not rows:
        return 0, 0
    trusted = offline_verdicts_trusted(now=now)
    verdicts = {
        pk: (
            settle_verdict(
                InFlight(id=pk, wave=0, on_target=ok, overdue=False, arrived_at=arrived_at, still=ok, online=up),
                min_ready_seconds=seconds,
                now=now,
                trusted=trusted,
            ),
            state,
        )
        for pk, ok, up, arrived_at, seconds, state in rows
    }
    broken = [pk for pk, (verdict, _) in verdicts.items() if verdict == [Settle.NOT_READY]]
    ready = [(pk, state) for pk, (verdict, state) in verdicts.items() if verdict == [Settle.READY]]
    failed = fail_and_send_back(
        rows=send_back_rows(NodeUpgrade.objects.filter(id__in=broken)), reason=NodeUpgrade.Reason.NOT_READY, at=now
    )
    succeeded = 0
    for rollout_state in {state for _, state in ready}:
        succeeded += succeed_upgrades(
            ids=[pk for pk, state in ready if state == rollout_state], rollout_state=rollout_state, at=now, why="ready"
        )
    return succeeded, failed


def node_upgrades_roll_back(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Abort with rollback: in-flight nodes go back to their previous release when it is registered.

    Returns (rolled back, kept in flight). A node already running the target
    version succeeds instead (its join notice is late; a confirmed agent refuses
    older binaries). A node whose previous release is not registered stays in
    flight, with the reason saying why.
    """
    # Locked: a node the join path settles meanwhile must not be sent back (succeeded is final).
    locked = NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT).select_for_update(of=("self",))
    arrived = list(locked.on_target().values_list("id", flat=True))
    succeed_upgrades(
        ids=arrived, rollout_state=rollout.state, at=now, rollout=str(rollout.id), why="on_target_at_abort"
    )
    rows = send_back_rows(locked.exclude(id__in=arrived))
    back = [row for row in rows if row.section is not None]
    kept = [row.id for row in rows if row.section is None]
    rolled_back = roll_back_upgrades(rows=back, at=now)
    keep_in_flight(ids=kept, reason=NodeUpgrade.Reason.PREVIOUS_NOT_REGISTERED)
    return rolled_back, len(kept)


def settles_apply(*, rollout: Rollout, settles: Mapping[Settle, Sequence[int]], now: datetime) -> tuple[int, int]:
    """Write the settles a tick decided (``decide.settle_verdict``), in ``SETTLE_ORDER``: (succeeded, failed).

    Each move is conditional (a row the join path settled meanwhile is left alone); the rows sent back are
    locked first, skipping those another worker holds.
    """
    succeeded = failed = 0
    context: dict[str, str | int] = {"rollout": str(rollout.id)}
    for verdict in SETTLE_ORDER:
        ids = list(settles.get(verdict, ()))
        if not ids:
            continue
        rows = NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT)
        if verdict == Settle.SUCCEED:
            succeeded += succeed_upgrades(
                ids=ids, rollout_state=rollout.state, at=now, version=rollout.release.version, **context
            )
        elif verdict == Settle.ARRIVE:
            mark_arrived(ids=ids, **context)
        elif verdict == Settle.READY:
            succeeded += succeed_upgrades(ids=ids, rollout_state=rollout.state, at=now, why="ready", **context)
        else:
            locked = rows.select_for_update(skip_locked=True, of=("self",))
            if verdict == Settle.TIMEOUT:  # one that arrived meanwhile is not timed out
                locked = locked.filter(arrived_at__isnull=True).exclude(Exists(sessions_on_target()))
                reason = NodeUpgrade.Reason.TIMEOUT
            else:
                reason = NodeUpgrade.Reason.NOT_READY
            failed += fail_and_send_back(rows=send_back_rows(locked), reason=reason, at=now)
    return succeeded, failed
