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
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import structlog
from django.db import transaction
from django.db.models import Count, Exists, F, Max, OuterRef
from django.utils import timezone

from fleet.interface import (
    Command,
    Node,
    NodeSession,
    commands_enqueue,
    offline_verdicts_trusted,
    online_node_q,
    pool_budget,
    pool_windows_open,
)
from rollout import conf
from rollout.dispatch import TICK_TASK, TIMEOUTS_DUE_TASK, publish_on_commit
from rollout.metrics import TICK_SECONDS
from rollout.models import NodeUpgrade, ReleaseBinary, Rollout, RolloutWave, TickRequest
from rollout.services.daemons import daemon_section, min_protocol_version, send_back_rows, set_daemons
from rollout.services.transitions import (
    complete_rollout,
    fail_and_send_back,
    keep_in_flight,
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


def failure_ratio_judged(*, rollout: Rollout, counts: dict[str, int]) -> bool:
    """CONTRACT 9.2: the ratio is judged once ``failureRatioMinSettled`` of the wave's nodes settled
    (succeeded + failed), or once all of them have (nothing pending or in flight)."""
    settled = counts[State.FAILED] + counts[State.SUCCEEDED]
    wave_over = not counts[State.PENDING] and not counts[State.IN_FLIGHT]
    return settled >= rollout.failure_ratio_min_settled or wave_over


def failure_ratio_exceeded(*, rollout: Rollout, counts: dict[str, int]) -> bool:
    """The rule: the current wave's failed / (succeeded + failed) exceeds maxFailureRatio.

    Exactly "exceeds": equality does not pause. Exact arithmetic (Decimal).
    Failures an operator accepted by resuming do not count again; a new one does.
    Judged only once the wave's minimum sample settled (``failure_ratio_judged``).
    """
    failed, succeeded = counts[State.FAILED], counts[State.SUCCEEDED]
    if failed <= rollout.acknowledged_failures or failed + succeeded == 0:
        return False
    if not failure_ratio_judged(rollout=rollout, counts=counts):
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
    """In-flight nodes whose current session reports the target version succeed."""
    ids = list(
        NodeUpgrade.objects.filter(
            rollout=rollout,
            state=State.IN_FLIGHT,
            node__session__daemon_version=F("target_version"),
            node__session__left_at__isnull=True,
        ).values_list("id", flat=True)
    )
    return succeed_upgrades(
        ids=ids, rollout_state=rollout.state, at=now, rollout=str(rollout.id), version=rollout.release.version
    )


def node_upgrade_settle_reported(*, node_id: UUID, daemon_version: str) -> bool:
    """The agent's join path: a node that rejoins on its target version succeeds at once."""
    row = (
        NodeUpgrade.objects.filter(node_id=node_id, state=State.IN_FLIGHT, target_version=daemon_version)
        .select_related("rollout")
        .first()
    )
    if row is None:
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
    """
    queryset = NodeUpgrade.objects.filter(state=State.IN_FLIGHT, deadline__lte=now)
    if rollout is not None:
        queryset = queryset.filter(rollout=rollout)
    if rollout_ids is not None:
        queryset = queryset.filter(rollout_id__in=list(rollout_ids))
    if ids is not None:
        queryset = queryset.filter(id__in=list(ids))
    locked = queryset.select_for_update(skip_locked=True, of=("self",))
    arrived = list(locked.filter(_on_target()).values_list("id", "rollout__state"))
    succeeded = 0
    for rollout_state in {state for _, state in arrived}:
        succeeded += succeed_upgrades(
            ids=[pk for pk, state in arrived if state == rollout_state], rollout_state=rollout_state, at=now
        )
    if not offline_verdicts_trusted(now=now):
        # The server was not hearing its fleet a moment ago: an agent may have rejoined on the
        # target meanwhile and not been heard yet. Decide once a whole online window was heard.
        return succeeded, 0
    overdue = send_back_rows(locked.exclude(id__in=[pk for pk, _ in arrived]))
    failed = fail_and_send_back(rows=overdue, reason=NodeUpgrade.Reason.TIMEOUT, at=now)
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
    waiting = sorted(rollout.pools.filter(Exists(pending.filter(pool_id=OuterRef("pk")))).values_list("id", flat=True))
    # CONTRACT 9.1: a pool's nodes start only while one of its maintenance windows is open. A closed
    # pool's pending nodes wait (they are not skipped); the periodic tick sees the window open.
    open_now = pool_windows_open(pool_ids=waiting, now=now)
    pool_ids = [pool_id for pool_id in waiting if pool_id in open_now]
    if not pool_ids:
        return 0, 0
    release = rollout.release
    sha256_of_arch = dict(ReleaseBinary.objects.filter(release=release).values_list("arch", "sha256"))
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id")))
    timeout = timedelta(seconds=rollout.upgrade_timeout_seconds)
    minimum_protocol = min_protocol_version()
    # Right after the server could not hear its fleet (its database or web tier was down), a
    # node that looks offline may well be running: wait for it instead of skipping it.
    offline_is_down = offline_verdicts_trusted(now=now)

    to_start: dict[datetime, list[tuple[int, UUID]]] = defaultdict(list)  # start time -> (upgrade, node) ids
    sections: list[tuple[UUID, dict[str, Any]]] = []
    old_agents: list[tuple[UUID, dict[str, Any]]] = []
    skipped: dict[str, list[int]] = defaultdict(list)
    for pool_id in pool_ids:  # sorted: every worker takes pool locks in the same order
        room = pool_budget(pool_id=pool_id, lock=True).available
        # Start time is read under the pool lock: a node is never recorded as
        # started before the settle that freed its slot committed.
        started_at = max(now, timezone.now())
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
                to_start[started_at].append((row["id"], row["node_id"]))
                sections.append((row["node_id"], section))
                if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                    old_agents.append((row["node_id"], section))
                room -= 1
            if len(chunk) < limit:
                break

    for reason, ids in skipped.items():
        skip_upgrades(rollout=rollout, ids=ids, reason=reason, at=now)
    started = 0
    for started_at, starts in to_start.items():
        started += start_upgrades(rollout=rollout, starts=starts, started_at=started_at, deadline=started_at + timeout)
        # One timeout sweep per start time (not per node): it settles exactly the nodes overdue then.
        publish_on_commit(TIMEOUTS_DUE_TASK, args=[str(rollout.id)], eta=started_at + timeout)
    if started:
        set_daemons(sections)
        if old_agents:
            commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)
    return started, sum(len(ids) for ids in skipped.values())


# --- the tick --------------------------------------------------------------------------


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
        result.succeeded = node_upgrades_settle_succeeded(rollout=rollout, now=now)
        arrived, result.failed = node_upgrades_settle_overdue(now=now, rollout=rollout)
        result.succeeded += arrived
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
        release_settled_claims()
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
