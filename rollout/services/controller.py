"""The controller: one function per step, and the tick that runs them for one rollout.

A tick (CONTRACT 5), for one rollout, under its row lock taken with
``skip_locked`` so two workers never reconcile the same rollout at once:

1. settle: in-flight nodes whose session reports the target version succeed;
   overdue ones fail and their spec.daemon goes back to the previous section;
2. judge: pause when the current wave's failure ratio exceeds the maximum;
3. advance: when the wave has settled and its soak is over, start the next
   wave, or complete after the last one;
4. start: pending nodes of the current wave, in position order, per pool,
   within the pool's disruption budget (under the pool's row lock).

Every state change is a conditional UPDATE (``filter(state=...)``), so a tick
repeated after a crash, or racing the agent's join path or a timeout task,
never moves a row twice.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, F, Max, OuterRef, Subquery
from django.utils import timezone

from project.metrics import TICK_SECONDS
from rollout import conf
from rollout.fleet import (
    Command,
    Node,
    NodeSession,
    commands_enqueue,
    nodes_set_daemon,
    online_node_q,
    pool_budget,
    pools_set_default_daemon_version,
)
from rollout.models import NodeUpgrade, ReleaseBinary, Rollout, RolloutEvent, RolloutWave, TickRequest
from rollout.services.events import event_record

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


def rollout_request_tick(*, rollout_id: UUID, countdown: float = 0.0) -> None:
    """Ask for a tick of one rollout soon, debounced: at most one is queued at a time.

    The flag is cleared when the tick starts; the periodic tick clears it too,
    so a lost message delays a rollout by one period at most.
    """
    from rollout import tasks

    queued = TickRequest.objects.filter(
        rollout_id=rollout_id, queued=False, rollout__state__in=Rollout.ACTIVE_STATES
    ).update(queued=True)
    if queued:
        transaction.on_commit(lambda: tasks.rollout_tick.apply_async(args=[str(rollout_id)], countdown=countdown))


def _tick_at(rollout_id: UUID, when: datetime) -> None:
    from rollout import tasks

    transaction.on_commit(lambda: tasks.rollout_tick.apply_async(args=[str(rollout_id)], eta=when))


# --- counts ----------------------------------------------------------------------------


def wave_counts(*, rollout: Rollout, wave: int) -> dict[str, int]:
    rows = NodeUpgrade.objects.filter(rollout=rollout, wave=wave).values("state").annotate(n=Count("id")).order_by()
    counts = dict.fromkeys(State.values, 0)
    counts.update({row["state"]: row["n"] for row in rows})
    return counts


def wave_failures(rollout: Rollout) -> int:
    return wave_counts(rollout=rollout, wave=rollout.current_wave)[State.FAILED]


# --- transitions of the rollout --------------------------------------------------------


def rollout_mark_paused(*, rollout: Rollout, reason: str, at: datetime, **data: Any) -> None:
    """active -> paused (the caller holds the rollout's row lock)."""
    rollout.state = Rollout.State.PAUSED
    rollout.paused_reason = reason
    rollout.save(update_fields=["state", "paused_reason"])
    event_record(rollout=rollout, kind=RolloutEvent.Kind.PAUSED, at=at, reason=reason, **data)


def rollout_judge_failures(*, rollout: Rollout, now: datetime, counts: dict[str, int] | None = None) -> bool:
    """Pause when failed / (succeeded + failed) of the current wave exceeds maxFailureRatio.

    Exactly "exceeds": equality does not pause. Exact arithmetic (Decimal).
    Failures an operator accepted by resuming do not pause again; a new one does.
    """
    counts = counts or wave_counts(rollout=rollout, wave=rollout.current_wave)
    failed, succeeded = counts[State.FAILED], counts[State.SUCCEEDED]
    if failed <= rollout.acknowledged_failures or failed + succeeded == 0:
        return False
    if Decimal(failed) <= rollout.max_failure_ratio * (failed + succeeded):
        return False
    rollout_mark_paused(
        rollout=rollout,
        reason=Rollout.PausedReason.FAILURE_RATIO,
        at=now,
        wave=rollout.current_wave,
        failed=failed,
        succeeded=succeeded,
        maxFailureRatio=float(rollout.max_failure_ratio),
    )
    return True


def rollout_complete(*, rollout: Rollout, now: datetime) -> None:
    """active -> completed; the covered pools take the version as their default."""
    rollout.state = Rollout.State.COMPLETED
    rollout.completed_at = now
    rollout.save(update_fields=["state", "completed_at"])
    NodeUpgrade.objects.filter(rollout=rollout, claims_node=True).exclude(state=State.IN_FLIGHT).update(
        claims_node=False
    )
    # The pools it actually covered: those of its own nodes (one writer per node means no newer
    # rollout can have taken them meanwhile).
    covered = NodeUpgrade.objects.filter(rollout=rollout).values_list("pool_id", flat=True).distinct()
    pools_set_default_daemon_version(pool_ids=list(covered.order_by()), version=rollout.release.version)
    totals = dict(NodeUpgrade.objects.filter(rollout=rollout).values_list("state").annotate(n=Count("id")).order_by())
    event_record(rollout=rollout, kind=RolloutEvent.Kind.COMPLETED, at=now, **totals)


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
    is_last = rollout.current_wave == max(waves)
    if wave.settled_at is None:
        last_settled = NodeUpgrade.objects.filter(rollout=rollout, wave=wave.index).aggregate(last=Max("settled_at"))[
            "last"
        ]
        wave.settled_at = last_settled or now
        wave.save(update_fields=["settled_at"])
        rollout.next_wave_at = wave.settled_at + timedelta(seconds=rollout.soak_seconds)
        rollout.save(update_fields=["next_wave_at"])
    if is_last:
        rollout_complete(rollout=rollout, now=now)
        return True
    if rollout.next_wave_at is not None and now < rollout.next_wave_at:
        _tick_at(rollout.id, rollout.next_wave_at)  # on time, not up to a period late (again if early)
        return False
    rollout.current_wave += 1
    rollout.acknowledged_failures = 0
    rollout.next_wave_at = None
    rollout.save(update_fields=["current_wave", "acknowledged_failures", "next_wave_at"])
    upcoming = waves[rollout.current_wave]
    upcoming.started_at = now
    upcoming.save(update_fields=["started_at"])
    event_record(
        rollout=rollout,
        kind=RolloutEvent.Kind.WAVE,
        at=now,
        wave=upcoming.index,
        percent=float(upcoming.percent),
        total=upcoming.total,
    )
    return True


# --- settling nodes --------------------------------------------------------------------


def _claims(rollout_state: str) -> bool:
    # A settled row keeps holding its node while its rollout is active or paused.
    return rollout_state in Rollout.ACTIVE_STATES


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
    if not ids:
        return 0
    updated = NodeUpgrade.objects.filter(id__in=ids, state=State.IN_FLIGHT).update(
        state=State.SUCCEEDED, settled_at=now, claims_node=_claims(rollout.state)
    )
    log.info("node_upgrade.succeeded", rollout=str(rollout.id), count=updated, version=rollout.release.version)
    return updated


def node_upgrade_settle_reported(*, node_id: UUID, daemon_version: str) -> bool:
    """The agent's join path: a node that rejoins on its target version succeeds at once."""
    row = (
        NodeUpgrade.objects.filter(node_id=node_id, state=State.IN_FLIGHT, target_version=daemon_version)
        .select_related("rollout")
        .first()
    )
    if row is None:
        return False
    now = timezone.now()
    updated = NodeUpgrade.objects.filter(pk=row.pk, state=State.IN_FLIGHT).update(
        state=State.SUCCEEDED, settled_at=now, claims_node=_claims(row.rollout.state)
    )
    if not updated:
        return False
    log.info(
        "node_upgrade.succeeded",
        tenant=row.rollout.tenant_id,
        rollout=str(row.rollout_id),
        node=str(node_id),
        version=daemon_version,
    )
    rollout_request_tick(rollout_id=row.rollout_id)
    return True


def _set_daemons(assignments: Iterable[tuple[UUID, dict | None]]) -> None:
    """Set spec.daemon per node: one UPDATE per distinct section, not per node."""
    groups: dict[str, list[UUID]] = defaultdict(list)
    for node_id, section in assignments:
        groups[json.dumps(section, sort_keys=True)].append(node_id)
    for key, node_ids in groups.items():
        nodes_set_daemon(node_ids=node_ids, daemon=json.loads(key))


def _cancel_upgrade_commands(node_ids: list[UUID]) -> None:
    if node_ids:
        Command.objects.filter(
            node_id__in=node_ids,
            kind=Command.Kind.DAEMON_UPGRADE,
            state__in=[Command.State.PENDING, Command.State.ACKED],
        ).update(state=Command.State.CANCELLED, completed_at=timezone.now())


@transaction.atomic
def node_upgrades_fail_overdue(
    *, now: datetime, rollout: Rollout | None = None, ids: Iterable[int] | None = None
) -> int:
    """In-flight nodes past their deadline fail; their spec.daemon goes back to the previous section.

    Rows another worker is settling right now are skipped (``skip_locked``).
    """
    queryset = NodeUpgrade.objects.filter(state=State.IN_FLIGHT, deadline__lte=now)
    if rollout is not None:
        queryset = queryset.filter(rollout=rollout)
    if ids is not None:
        queryset = queryset.filter(id__in=list(ids))
    on_target = Exists(
        NodeSession.objects.filter(
            node_id=OuterRef("node_id"), daemon_version=OuterRef("target_version"), left_at__isnull=True
        )
    )
    rows = list(
        queryset.select_for_update(skip_locked=True, of=("self",))
        .annotate(on_target=on_target)
        .values(
            "id",
            "node_id",
            "node__arch",
            "node__session__protocol_version",
            "previous_daemon",
            "previous_version",
            "rollout_id",
            "rollout__state",
            "rollout__tenant_id",
            "on_target",
        )
    )
    # A node whose agent already runs the target version succeeded; only its notice was
    # lost (or is late). Never fail it and send it back.
    arrived = [row for row in rows if row["on_target"]]
    overdue = [row for row in rows if not row["on_target"]]
    for claims in (True, False):
        for state, reason, chosen_rows in ((State.SUCCEEDED, None, arrived), (State.FAILED, "timeout", overdue)):
            chosen = [row["id"] for row in chosen_rows if _claims(row["rollout__state"]) == claims]
            if chosen:
                NodeUpgrade.objects.filter(id__in=chosen, state=State.IN_FLIGHT).update(
                    state=state, reason=reason, settled_at=now, claims_node=claims
                )
    if not overdue:
        return 0
    # Back to what the node ran before (as a rollback would), else literally its previous section.
    previous = _registered_previous(overdue)
    _send_back([(row, section or row["previous_daemon"]) for row, section in zip(overdue, previous, strict=True)])
    for row in overdue:
        log.info(
            "node_upgrade.failed",
            tenant=row["rollout__tenant_id"],
            rollout=str(row["rollout_id"]),
            node=str(row["node_id"]),
            reason="timeout",
        )
    return len(overdue)


def _send_back(rows_and_sections: list[tuple[dict[str, Any], dict | None]]) -> None:
    """Set each node's spec.daemon back to ``section``.

    Agents below FLEET_MIN_PROTOCOL_VERSION do not apply spec.daemon: they get a
    daemon.upgrade command with that section (which supersedes the pending one);
    others just lose their pending daemon.upgrade command.
    """
    _set_daemons((row["node_id"], section) for row, section in rows_and_sections)
    min_protocol = _min_protocol_version()
    old = [
        (row["node_id"], section)
        for row, section in rows_and_sections
        if section and (row["node__session__protocol_version"] or 0) < min_protocol
    ]
    old_ids = {node_id for node_id, _ in old}
    _cancel_upgrade_commands([row["node_id"] for row, _ in rows_and_sections if row["node_id"] not in old_ids])
    if old:
        commands_enqueue(node_ids_payloads=old, kind=Command.Kind.DAEMON_UPGRADE)


def _registered_previous(rows: list[dict[str, Any]]) -> list[dict | None]:
    """Per row, the daemon section the node ran before, when that release is registered.

    The previous section recorded at start, else (the node had no desired
    daemon) the section of the version its agent reported then. None when that
    release is not registered or has no binary for the node's arch. One query.
    """
    versions = {(row["previous_daemon"] or {}).get("version") or row["previous_version"] for row in rows}
    binaries = {
        (version, arch): sha256
        for version, arch, sha256 in ReleaseBinary.objects.filter(release__version__in=versions).values_list(
            "release__version", "arch", "sha256"
        )
    }
    sections: list[dict | None] = []
    for row in rows:
        arch, section = row["node__arch"], row["previous_daemon"]
        if section:
            sections.append(section if (section.get("version"), arch) in binaries else None)
            continue
        version = row["previous_version"]
        sha256 = binaries.get((version, arch))
        url = conf.binary_url(version, f"linux-{arch}") if version else None
        sections.append({"version": version, "url": url, "sha256": sha256} if sha256 and url else None)
    return sections


def node_upgrades_roll_back(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Send in-flight nodes back to their previous section when that release is registered.

    Returns (rolled back, kept in flight). A node whose previous release is not
    registered stays in flight, with the reason saying why.
    """
    # Locked: a node the join path settles meanwhile must not be sent back (succeeded is final).
    rows = list(
        NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT)
        .select_for_update(of=("self",))
        .values("id", "node_id", "node__arch", "node__session__protocol_version", "previous_daemon", "previous_version")
    )
    if not rows:
        return 0, 0
    back: list[tuple[dict[str, Any], dict]] = []
    back_ids, kept_ids = [], []
    for row, section in zip(rows, _registered_previous(rows), strict=True):
        if section is None:
            kept_ids.append(row["id"])
        else:
            back.append((row, section))
            back_ids.append(row["id"])
    NodeUpgrade.objects.filter(id__in=back_ids, state=State.IN_FLIGHT).update(
        state=State.ROLLED_BACK, reason=NodeUpgrade.Reason.ROLLED_BACK, settled_at=now, claims_node=False
    )
    NodeUpgrade.objects.filter(id__in=kept_ids).update(reason=NodeUpgrade.Reason.PREVIOUS_NOT_REGISTERED)
    _send_back(back)
    return len(back_ids), len(kept_ids)


# --- starting nodes --------------------------------------------------------------------


def _min_protocol_version() -> int:
    value = settings.FLEET_MIN_PROTOCOL_VERSION
    return value if isinstance(value, int) else 2


def rollout_start_nodes(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Start pending nodes of the current wave within each pool's budget. Returns (started, skipped)."""
    pending = NodeUpgrade.objects.filter(rollout=rollout, wave=rollout.current_wave, state=State.PENDING)
    pool_ids = sorted(rollout.pools.filter(Exists(pending.filter(pool_id=OuterRef("pk")))).values_list("id", flat=True))
    if not pool_ids:
        return 0, 0
    release = rollout.release
    sha256_of_arch = dict(ReleaseBinary.objects.filter(release=release).values_list("arch", "sha256"))
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id")))
    timeout = timedelta(seconds=rollout.upgrade_timeout_seconds)
    min_protocol = _min_protocol_version()

    to_start: dict[datetime, list[int]] = defaultdict(list)  # start time -> node upgrade ids
    sections: list[tuple[UUID, dict]] = []
    old_agents: list[tuple[UUID, dict]] = []
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
                )[:limit]
            )
            for row in chunk:
                if room == 0:
                    break
                cursor = row["position"]
                arch = row["node__arch"]
                if not row["online"]:
                    skipped[NodeUpgrade.Reason.OFFLINE].append(row["id"])
                    continue
                if arch not in sha256_of_arch:
                    skipped[NodeUpgrade.Reason.NO_BINARY].append(row["id"])
                    continue
                section = {
                    "version": release.version,
                    "url": conf.binary_url(release.version, f"linux-{arch}"),
                    "sha256": sha256_of_arch[arch],
                }
                to_start[started_at].append(row["id"])
                sections.append((row["node_id"], section))
                if (row["node__session__protocol_version"] or 0) < min_protocol:
                    old_agents.append((row["node_id"], section))
                room -= 1
            if len(chunk) < limit:
                break

    for reason, ids in skipped.items():
        NodeUpgrade.objects.filter(id__in=ids, state=State.PENDING).update(
            state=State.SKIPPED, reason=reason, settled_at=now
        )
    started = sum(len(ids) for ids in to_start.values())
    if started:
        for started_at, ids in to_start.items():
            _mark_started(ids=ids, started_at=started_at, deadline=started_at + timeout)
        _set_daemons(sections)
        if old_agents:
            commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)
        _schedule_timeouts([(i, at + timeout) for at, ids in to_start.items() for i in ids])
        for node_id, _ in sections:
            log.info(
                "node_upgrade.started",
                tenant=rollout.tenant_id,
                rollout=str(rollout.id),
                node=str(node_id),
                version=release.version,
                wave=rollout.current_wave,
            )
    return started, sum(len(ids) for ids in skipped.values())


def _mark_started(*, ids: list[int], started_at: datetime, deadline: datetime) -> int:
    """pending -> in_flight in one set-based UPDATE, recording what each node ran before.

    The previous section and version are read from the node and its session by
    the UPDATE itself (before spec.daemon changes), not sent row by row.
    """
    return NodeUpgrade.objects.filter(id__in=ids, state=State.PENDING).update(
        state=State.IN_FLIGHT,
        started_at=started_at,
        deadline=deadline,
        previous_daemon=Subquery(Node.objects.filter(pk=OuterRef("node_id")).values("spec__daemon")[:1]),
        previous_version=Subquery(NodeSession.objects.filter(node_id=OuterRef("node_id")).values("daemon_version")[:1]),
    )


def _schedule_timeouts(deadlines: list[tuple[int, datetime]]) -> None:
    """One timeout task per started node, due at its deadline (the tick sweeps overdue nodes too)."""
    from rollout import tasks

    def send() -> None:
        for node_upgrade_id, deadline in deadlines:
            tasks.node_upgrade_timeout.apply_async(args=[node_upgrade_id], eta=deadline)

    transaction.on_commit(send)


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
        result.failed = node_upgrades_fail_overdue(now=now, rollout=rollout)
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


def claims_release_stale(*, now: datetime) -> int:
    """Settled rows of finished rollouts stop holding their node (repairs a join-path race)."""
    return (
        NodeUpgrade.objects.filter(claims_node=True, rollout__state__in=Rollout.TERMINAL_STATES)
        .exclude(state=State.IN_FLIGHT)
        .update(claims_node=False)
    )


def rollouts_tick_all() -> int:
    """``rollout/all``: fail overdue nodes everywhere, then tick each active rollout. Returns rollouts ticked."""
    now = timezone.now()
    with transaction.atomic():
        node_upgrades_fail_overdue(now=now)
        claims_release_stale(now=now)
    ticked = 0
    for rollout_id in Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES).values_list("id", flat=True):
        if rollout_tick(rollout_id=rollout_id) is not None:
            ticked += 1
    return ticked
