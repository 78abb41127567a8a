"""The controller: the steps of a tick, and the tick that runs them for one rollout.

A tick (CONTRACT 5), for one rollout, under its row lock taken with
``skip_locked`` so two workers never reconcile the same rollout at once:

1. settle: in-flight nodes whose session reports the target version succeed;
   overdue ones fail and their spec.daemon goes back to the previous section;
2. judge: pause when the current wave's failure ratio exceeds the maximum;
3. advance: when the wave has settled and its soak is over, start the next
   wave, or complete after the last one;
4. start: pending nodes of the current wave, in position order, per pool,
   within the pool's disruption budget (under the pool's row lock).

The controller decides which rows move; the moves themselves (conditional
UPDATE, one-writer flag, event, log line) are rollout/services/transitions.py.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Count, Exists, ExpressionWrapper, F, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from fleet.interface import (
    Command,
    Node,
    NodeSession,
    commands_enqueue,
    offline_verdicts_trusted,
    online_node_q,
    pool_budget,
)
from rollout import conf
from rollout.dispatch import TICK_TASK, TIMEOUTS_DUE_TASK, publish_on_commit
from rollout.metrics import TICK_SECONDS
from rollout.models import NodeUpgrade, Release, ReleaseBinary, ReleaseBlock, Rollout, RolloutWave, TickRequest
from rollout.services.daemons import daemon_section, min_protocol_version, send_back_rows, set_daemons
from rollout.services.transitions import (
    complete_rollout,
    converge_upgrades,
    fail_and_send_back,
    keep_in_flight,
    mark_arrived,
    pause_rollout,
    release_settled_claims,
    roll_back_upgrades,
    skip_upgrades,
    start_next_wave,
    start_upgrades,
    succeed_upgrades,
)

log = structlog.get_logger("rollout")

State = NodeUpgrade.State
# Pending rows read per query while looking for startable nodes past offline ones.
START_LOOKAHEAD = 100


@dataclass
class TickResult:
    succeeded: int = 0
    failed: int = 0
    started: int = 0
    skipped: int = 0
    paused: bool = False
    advanced: bool = False
    completed: bool = False


# --- asking for ticks ----------------------------------------------------------------


def rollout_request_tick(*, rollout_id: UUID | str, countdown: float = 0.0) -> None:
    """Ask for a tick of one rollout soon, debounced: at most one is queued at a time.

    The flag is cleared when the tick starts; the periodic tick clears it too,
    so a lost message delays a rollout by one period at most.
    """
    queued = TickRequest.objects.filter(
        rollout_id=rollout_id, queued=False, rollout__state__in=Rollout.ACTIVE_STATES
    ).update(queued=True)
    if queued:
        publish_on_commit(TICK_TASK, args=[str(rollout_id)], countdown=countdown)


# --- counts ----------------------------------------------------------------------------


def wave_counts(*, rollout: Rollout, wave: int) -> dict[str, int]:
    rows = NodeUpgrade.objects.filter(rollout=rollout, wave=wave).values("state").annotate(n=Count("id")).order_by()
    counts = dict.fromkeys(State.values, 0)
    counts.update({row["state"]: row["n"] for row in rows})
    return counts


def wave_failures(rollout: Rollout) -> int:
    return wave_counts(rollout=rollout, wave=rollout.current_wave)[State.FAILED]


# --- judging and advancing ---------------------------------------------------------------


def failure_ratio_exceeded(*, rollout: Rollout, counts: dict[str, int]) -> bool:
    """The rule: the current wave's failed / (succeeded + failed) exceeds maxFailureRatio.

    Exactly "exceeds": equality does not pause. Exact arithmetic (Decimal).
    Failures an operator accepted by resuming do not count again; a new one does.
    """
    failed, succeeded = counts[State.FAILED], counts[State.SUCCEEDED]
    if failed <= rollout.acknowledged_failures or failed + succeeded == 0:
        return False
    return Decimal(failed) > rollout.max_failure_ratio * (failed + succeeded)


def rollout_judge_failures(*, rollout: Rollout, now: datetime, counts: dict[str, int] | None = None) -> bool:
    """Pause the rollout (``failure_ratio``) when its current wave's failure ratio is exceeded."""
    counts = counts or wave_counts(rollout=rollout, wave=rollout.current_wave)
    if not failure_ratio_exceeded(rollout=rollout, counts=counts):
        return False
    pause_rollout(
        rollout=rollout,
        reason=Rollout.PausedReason.FAILURE_RATIO,
        at=now,
        wave=rollout.current_wave,
        failed=counts[State.FAILED],
        succeeded=counts[State.SUCCEEDED],
        maxFailureRatio=float(rollout.max_failure_ratio),
    )
    return True


def rollout_advance(*, rollout: Rollout, now: datetime) -> bool:
    """When the current wave has settled: record it, then after the soak start the next wave, or complete."""
    counts = wave_counts(rollout=rollout, wave=rollout.current_wave)
    if counts[State.PENDING] or counts[State.IN_FLIGHT]:
        return False
    # Judge again on the very counts that say the wave is over: a failure committed
    # after the judge step (a timeout task) must not let the rollout move on.
    if rollout_judge_failures(rollout=rollout, now=now, counts=counts):
        return False
    waves = {wave.index: wave for wave in RolloutWave.objects.filter(rollout=rollout)}
    wave = waves[rollout.current_wave]
    if wave.settled_at is None:
        last = NodeUpgrade.objects.filter(rollout=rollout, wave=wave.index).aggregate(last=Max("settled_at"))["last"]
        wave.settled_at = last or now
        wave.save(update_fields=["settled_at"])
        rollout.next_wave_at = wave.settled_at + timedelta(seconds=rollout.soak_seconds)
        rollout.save(update_fields=["next_wave_at"])
        if rollout.current_wave != max(waves):
            # One message for the soak's end, scheduled once (when the wave settles), not at every tick.
            publish_on_commit(TICK_TASK, args=[str(rollout.id)], eta=rollout.next_wave_at)
    if rollout.current_wave == max(waves):
        complete_rollout(rollout=rollout, at=now)
        return True
    if rollout.next_wave_at is not None and now < rollout.next_wave_at:
        return False
    start_next_wave(rollout=rollout, wave=waves[rollout.current_wave + 1], at=now)
    return True


# --- settling nodes --------------------------------------------------------------------


def node_upgrades_settle_succeeded(*, rollout: Rollout, now: datetime) -> int:
    """In-flight nodes whose current session reports the target version succeed.

    With minReadySeconds > 0 they record ``arrived_at`` instead and prove readiness
    (``node_upgrades_settle_ready``). Returns the nodes that succeeded.
    """
    ids = list(
        NodeUpgrade.objects.filter(
            rollout=rollout,
            state=State.IN_FLIGHT,
            arrived_at__isnull=True,
            node__session__daemon_version=F("target_version"),
            node__session__left_at__isnull=True,
        ).values_list("id", flat=True)
    )
    if rollout.min_ready_seconds:
        mark_arrived(ids=ids, rollout=str(rollout.id))
        return 0
    return succeed_upgrades(
        ids=ids, rollout_state=rollout.state, at=now, rollout=str(rollout.id), version=rollout.release.version
    )


def node_upgrade_settle_reported(*, node_id: UUID, daemon_version: str) -> bool:
    """The agent's join path: a node that rejoins on its target version succeeds at once.

    With minReadySeconds > 0 it records ``arrived_at`` instead. A node already proving
    readiness that joins again (it left meanwhile) or reports another version fails
    (``not_ready``) and goes back. Returns whether the row settled.
    """
    row = NodeUpgrade.objects.filter(node_id=node_id, state=State.IN_FLIGHT).select_related("rollout").first()
    if row is None:
        return False
    if row.arrived_at is not None:
        _, failed = node_upgrades_settle_ready(now=timezone.now(), node_id=node_id)
        if failed:
            rollout_request_tick(rollout_id=row.rollout_id)
        return bool(failed)
    if row.target_version != daemon_version:
        return False
    if row.rollout.min_ready_seconds:
        # Proving readiness: the tick it asks for publishes one tick at the readiness end.
        if mark_arrived(ids=[row.pk], rollout=str(row.rollout_id), node=str(node_id)):
            rollout_request_tick(rollout_id=row.rollout_id)
        return False
    settled = succeed_upgrades(
        ids=[row.pk],
        rollout_state=row.rollout.state,
        at=timezone.now(),
        tenant=row.rollout.tenant_id,
        rollout=str(row.rollout_id),
        node=str(node_id),
        version=daemon_version,
    )
    if settled:
        rollout_request_tick(rollout_id=row.rollout_id)
    return bool(settled)


def _on_target() -> Exists:
    """The node's current session (open, not left) reports the row's target version."""
    return Exists(
        NodeSession.objects.filter(
            node_id=OuterRef("node_id"), daemon_version=OuterRef("target_version"), left_at__isnull=True
        )
    )


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
    arrived = list(locked.filter(_on_target()).values_list("id", "rollout__state", "rollout__min_ready_seconds"))
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
    """Nodes proving readiness (CONTRACT 9.3) settle: (succeeded, failed).

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
    still = Exists(
        NodeSession.objects.filter(
            node_id=OuterRef("node_id"),
            daemon_version=OuterRef("target_version"),
            left_at__isnull=True,
            joined_at__lte=OuterRef("arrived_at"),
        )
    )
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id")))
    rows = list(
        locked.annotate(still=still, online=online).values_list(
            "id", "still", "online", "arrived_at", "rollout__min_ready_seconds", "rollout__state"
        )
    )
    if not rows:
        return 0, 0
    trusted = offline_verdicts_trusted(now=now)
    broken = [pk for pk, ok, up, _, _, _ in rows if not ok or (trusted and not up)]
    ready = [
        (pk, state)
        for pk, ok, up, arrived_at, seconds, state in rows
        if ok and up and arrived_at is not None and arrived_at + timedelta(seconds=seconds) <= now
    ]
    failed = fail_and_send_back(
        rows=send_back_rows(NodeUpgrade.objects.filter(id__in=broken)), reason=NodeUpgrade.Reason.NOT_READY, at=now
    )
    succeeded = 0
    for rollout_state in {state for _, state in ready}:
        succeeded += succeed_upgrades(
            ids=[pk for pk, state in ready if state == rollout_state], rollout_state=rollout_state, at=now, why="ready"
        )
    return succeeded, failed


def readiness_tick_publish(*, rollout: Rollout, now: datetime) -> None:
    """One tick at the earliest readiness end of the rollout's nodes, when it comes before the next period.

    Later ends are the business of later ticks (the periodic one always runs within a
    period before each), so a tick publishes at most one message, whatever its nodes.
    """
    if not rollout.min_ready_seconds:
        return
    first = NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT, arrived_at__isnull=False).aggregate(
        first=Min("arrived_at")
    )["first"]
    if first is None:
        return
    end = first + timedelta(seconds=rollout.min_ready_seconds)
    if now < end <= now + timedelta(seconds=conf.options().every):
        publish_on_commit(TICK_TASK, args=[str(rollout.id)], eta=end)


def node_upgrades_roll_back(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Abort with rollback: in-flight nodes go back to their previous release when it is registered.

    Returns (rolled back, kept in flight). A node already running the target
    version succeeds instead (its join notice is late; a confirmed agent refuses
    older binaries). A node whose previous release is not registered stays in
    flight, with the reason saying why.
    """
    # Locked: a node the join path settles meanwhile must not be sent back (succeeded is final).
    locked = NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT).select_for_update(of=("self",))
    arrived = list(locked.filter(_on_target()).values_list("id", flat=True))
    succeed_upgrades(
        ids=arrived, rollout_state=rollout.state, at=now, rollout=str(rollout.id), why="on_target_at_abort"
    )
    rows = send_back_rows(locked.exclude(id__in=arrived))
    back = [row for row in rows if row.section is not None]
    kept = [row.id for row in rows if row.section is None]
    rolled_back = roll_back_upgrades(rows=back, at=now)
    keep_in_flight(ids=kept, reason=NodeUpgrade.Reason.PREVIOUS_NOT_REGISTERED)
    return rolled_back, len(kept)


# --- starting nodes --------------------------------------------------------------------


def rollout_start_nodes(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Start pending nodes of the current wave within each pool's budget. Returns (started, skipped)."""
    pending = NodeUpgrade.objects.filter(rollout=rollout, wave=rollout.current_wave, state=State.PENDING)
    pool_ids = sorted(rollout.pools.filter(Exists(pending.filter(pool_id=OuterRef("pk")))).values_list("id", flat=True))
    if not pool_ids:
        return 0, 0
    release = rollout.release
    sha256_of_arch = dict(ReleaseBinary.objects.filter(release=release).values_list("arch", "sha256"))
    # On the session row the chunk joins anyway: an EXISTS here was planned as a hash of every
    # session of the fleet, once per pool (0.3 s per pool at 100,000 nodes).
    online = ExpressionWrapper(_on_node(online_node_q(now=now)), output_field=BooleanField())
    timeout = timedelta(seconds=rollout.upgrade_timeout_seconds)
    minimum_protocol = min_protocol_version()
    # Right after the server could not hear its fleet (its database or web tier was down), a
    # node that looks offline may well be running: wait for it instead of skipping it.
    offline_is_down = offline_verdicts_trusted(now=now)

    to_start: list[tuple[int, UUID]] = []  # (upgrade, node) ids
    sections: list[tuple[UUID, dict[str, Any]]] = []
    old_agents: list[tuple[UUID, dict[str, Any]]] = []
    skipped: dict[str, list[int]] = defaultdict(list)
    for pool_id in pool_ids:  # sorted: every worker takes pool locks in the same order
        room = pool_budget(pool_id=pool_id, lock=True).available
        cursor = -1
        while room > 0:
            limit = room + START_LOOKAHEAD
            chunk = list(
                pending.filter(pool_id=pool_id, position__gt=cursor)
                .annotate(online=online)
                .order_by("position")
                .values(
                    "id",
                    "node_id",
                    "position",
                    "online",
                    "node__arch",
                    "node__session__protocol_version",
                    "node__session__joined_at",
                )[:limit]
            )
            for row in chunk:
                if room == 0:
                    break
                cursor = row["position"]
                arch = row["node__arch"]
                if not row["online"]:
                    if offline_is_down or row["node__session__joined_at"] is None:  # never joined: never ran
                        skipped[NodeUpgrade.Reason.OFFLINE].append(row["id"])
                    continue
                if arch not in sha256_of_arch:
                    skipped[NodeUpgrade.Reason.NO_BINARY].append(row["id"])
                    continue
                section = daemon_section(version=release.version, arch=arch, sha256=sha256_of_arch[arch])
                to_start.append((row["id"], row["node_id"]))
                sections.append((row["node_id"], section))
                if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                    old_agents.append((row["node_id"], section))
                room -= 1
            if len(chunk) < limit:
                break

    for reason, ids in skipped.items():
        skip_upgrades(rollout=rollout, ids=ids, reason=reason, at=now)
    started = 0
    if to_start:
        # Start time is read under every pool lock: a node is never recorded as started before
        # the settle that freed its slot committed. One time for the tick: one UPDATE, one sweep.
        started_at = max(now, timezone.now())
        started = start_upgrades(rollout=rollout, starts=to_start, started_at=started_at, deadline=started_at + timeout)
        _timeouts_due(rollout_id=rollout.id, at=started_at + timeout)
    if started:
        _send_out(sections=sections, old_agents=old_agents)
    return started, sum(len(ids) for ids in skipped.values())


def _on_node(q: Q, prefix: str = "node__") -> Q:
    """``q``, a Q on Node, as a Q on rows that reference the node (``node__`` before each lookup)."""
    children = [_on_node(c, prefix) if isinstance(c, Q) else (prefix + c[0], c[1]) for c in q.children]
    return Q(*children, _connector=q.connector, _negated=q.negated)


def _timeouts_due(*, rollout_id: UUID, at: datetime) -> None:
    """One timeout sweep per start time (not per node): it settles exactly the nodes overdue then."""
    publish_on_commit(TIMEOUTS_DUE_TASK, args=[str(rollout_id)], eta=at)


def _send_out(*, sections: list[tuple[UUID, dict[str, Any]]], old_agents: list[tuple[UUID, dict[str, Any]]]) -> None:
    """Started nodes get their spec.daemon; agents below the minimum protocol also a daemon.upgrade command."""
    set_daemons(sections)
    if old_agents:
        commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)


# --- convergence after completion (CONTRACT 9.6) ---------------------------------------------


def pool_window_open(*, pool_id: UUID, now: datetime) -> bool:
    """Whether nodes of the pool may start now (maintenance windows, CONTRACT 9.1).

    The one call site of the window check for convergence: always open until the
    pool's windows are merged (fleet.interface then answers this).
    """
    return True


def convergence_candidates(*, now: datetime) -> QuerySet[NodeUpgrade]:
    """Rows that converge: skipped (offline) in a completed rollout, node online again on an older version.

    Not when a newer rollout has a row for the node (it took the node: this ends here), another
    row holds the node, the tenant blocked the release, or the release has no binary for its arch.
    An older version: one that is not a registered release of the target's sequence or higher.
    """
    node = OuterRef("node_id")
    newer = NodeUpgrade.objects.filter(node_id=node, rollout__created_at__gt=OuterRef("rollout__created_at"))
    claimed = NodeUpgrade.objects.filter(node_id=node, claims_node=True)
    not_older = Release.objects.filter(
        version=OuterRef("node__session__daemon_version"), sequence__gte=OuterRef("rollout__release__sequence")
    )
    blocked = ReleaseBlock.objects.filter(
        tenant_id=OuterRef("rollout__tenant_id"), release_id=OuterRef("rollout__release_id")
    )
    binary = ReleaseBinary.objects.filter(release_id=OuterRef("rollout__release_id"), arch=OuterRef("node__arch"))
    return (
        NodeUpgrade.objects.filter(
            state=State.SKIPPED, reason=NodeUpgrade.Reason.OFFLINE, rollout__state=Rollout.State.COMPLETED
        )
        .filter(Exists(Node.objects.filter(online_node_q(now=now), pk=node)), Exists(binary))
        .exclude(Exists(newer))
        .exclude(Exists(claimed))
        .exclude(Exists(not_older))
        .exclude(Exists(blocked))
    )


def rollouts_converge(*, now: datetime) -> int:
    """Upgrade the nodes of completed rollouts that come back (``convergence_candidates``), within budgets.

    Per pool, in id order, under the pool's row lock (``pool_budget(lock=True)``, as
    ``rollout_start_nodes``): two workers converging at once never exceed a budget.
    The candidates are read again under the lock. Returns the nodes started.
    """
    pool_ids = sorted(set(convergence_candidates(now=now).values_list("pool_id", flat=True).order_by()))
    started = 0
    for pool_id in pool_ids:
        if not pool_window_open(pool_id=pool_id, now=now):
            continue
        with transaction.atomic():
            room = pool_budget(pool_id=pool_id, lock=True).available
            if room <= 0:
                continue
            started_at = max(now, timezone.now())
            rows = list(
                convergence_candidates(now=now)
                .filter(pool_id=pool_id)
                .order_by("rollout__completed_at", "position")
                .values(
                    "id",
                    "node_id",
                    "rollout_id",
                    "target_version",
                    "node__arch",
                    "node__session__protocol_version",
                    "rollout__upgrade_timeout_seconds",
                    "rollout__release_id",
                )[:room]
            )
            started += _converge_rows(rows, started_at=started_at)
    return started


def _converge_rows(rows: Sequence[Mapping[str, Any]], *, started_at: datetime) -> int:
    """Start these candidate rows (already within the budget), per rollout."""
    sha256 = {
        (release_id, arch): digest
        for release_id, arch, digest in ReleaseBinary.objects.filter(
            release_id__in={row["rollout__release_id"] for row in rows}
        ).values_list("release_id", "arch", "sha256")
    }
    by_rollout: dict[UUID, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rollout[row["rollout_id"]].append(row)
    started = 0
    for rollout_id, group in by_rollout.items():
        deadline = started_at + timedelta(seconds=group[0]["rollout__upgrade_timeout_seconds"])
        moved = _converge_batch(rollout_id, group, sha256=sha256, started_at=started_at, deadline=deadline)
        if moved is None and len(group) > 1:
            # A new rollout took one of the nodes meanwhile: row by row, only the refused ones are left out.
            batches = ([row] for row in group)
            moved = sum(
                _converge_batch(rollout_id, batch, sha256=sha256, started_at=started_at, deadline=deadline) or 0
                for batch in batches
            )
        if moved:
            _timeouts_due(rollout_id=rollout_id, at=deadline)
            started += moved
    return started


def _converge_batch(
    rollout_id: UUID,
    batch: Sequence[Mapping[str, Any]],
    *,
    sha256: Mapping[tuple[int, str], str],
    started_at: datetime,
    deadline: datetime,
) -> int | None:
    """skipped -> in_flight for ``batch`` and their spec.daemon; None when the one-writer index refused it."""
    try:
        with transaction.atomic():
            moved = converge_upgrades(
                rollout_id=rollout_id,
                starts=[(row["id"], row["node_id"]) for row in batch],
                started_at=started_at,
                deadline=deadline,
            )
    except IntegrityError:
        return None
    if moved:
        minimum_protocol = min_protocol_version()
        sections = []
        old_agents = []
        for row in batch:
            arch = row["node__arch"]
            section = daemon_section(
                version=row["target_version"], arch=arch, sha256=sha256[(row["rollout__release_id"], arch)]
            )
            sections.append((row["node_id"], section))
            if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                old_agents.append((row["node_id"], section))
        _send_out(sections=sections, old_agents=old_agents)
    return moved


# --- the tick --------------------------------------------------------------------------


def release_blocked(rollout: Rollout) -> bool:
    """Whether the rollout's tenant blocked its release (CONTRACT 9.5)."""
    return ReleaseBlock.objects.filter(tenant_id=rollout.tenant_id, release_id=rollout.release_id).exists()


@TICK_SECONDS.time()
def rollout_tick(*, rollout_id: UUID | str) -> TickResult | None:
    """Reconcile one rollout. Returns None when another worker holds it (or it is gone)."""
    TickRequest.objects.filter(rollout_id=rollout_id, queued=True).update(queued=False)
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("release")
            .filter(pk=rollout_id)
            .first()
        )
        if rollout is None:
            # Another worker holds it and may have counted the budget before the settle that
            # asked for this tick: ask again shortly rather than wait for the period.
            rollout_request_tick(rollout_id=rollout_id, countdown=1)
            return None
        now = timezone.now()
        result = TickResult()
        if rollout.state == Rollout.State.ACTIVE and release_blocked(rollout):
            # First: a release blocked in the tenant (CONTRACT 9.5) pauses its rollouts; nodes in flight settle.
            pause_rollout(rollout=rollout, reason=Rollout.PausedReason.RELEASE_BLOCKED, at=now)
            result.paused = True
        result.succeeded = node_upgrades_settle_succeeded(rollout=rollout, now=now)
        arrived, result.failed = node_upgrades_settle_overdue(now=now, rollout=rollout)
        ready, not_ready = node_upgrades_settle_ready(now=now, rollout=rollout)
        result.succeeded += arrived + ready
        result.failed += not_ready
        readiness_tick_publish(rollout=rollout, now=now)
        if rollout.state != Rollout.State.ACTIVE:
            return result
        if rollout_judge_failures(rollout=rollout, now=now):
            result.paused = True
            return result
        result.advanced = rollout_advance(rollout=rollout, now=now)
        if rollout.state == Rollout.State.ACTIVE:
            result.started, result.skipped = rollout_start_nodes(rollout=rollout, now=now)
            if result.skipped and not result.started:
                # A wave of only offline nodes settles here: move on without waiting a period.
                result.advanced = rollout_advance(rollout=rollout, now=now) or result.advanced
        result.completed = rollout.state == Rollout.State.COMPLETED
        return result


def rollouts_tick_all() -> int:
    """``rollout/all``: settle overdue nodes everywhere, then tick each active or paused rollout.

    Each rollout's tick is isolated: one that raises is logged and the others go
    on. The order is shuffled every period so no rollout always comes last, and
    when the period's time is spent the rest are handed to ``rollout/tick``
    tasks (other workers) instead of starving. Returns the rollouts ticked here.
    """
    started = time.monotonic()
    budget = conf.options().every / 2
    now = timezone.now()
    with transaction.atomic():
        node_upgrades_settle_overdue(now=now)
        node_upgrades_settle_ready(now=now)
        release_settled_claims()
    try:
        rollouts_converge(now=now)
    except Exception:  # isolate: convergence must not stop the rollouts' ticks
        log.exception("rollout.converge_failed")
    rollout_ids = list(Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES).values_list("id", flat=True))
    random.shuffle(rollout_ids)  # fairness, not security
    ticked = 0
    for index, rollout_id in enumerate(rollout_ids):
        if time.monotonic() - started > budget:
            for rest in rollout_ids[index:]:
                rollout_request_tick(rollout_id=rest)
            break
        try:
            if rollout_tick(rollout_id=rollout_id) is not None:
                ticked += 1
        except Exception:  # isolate: one broken rollout must not stop the others' ticks
            log.exception("rollout.tick_failed", rollout=str(rollout_id))
    return ticked
