"""Rollouts: create (and dry-run), pause, resume, promote, abort.

The controller's steps live in rollout/services/controller.py.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput, InvalidState, NotFound, Unavailable
from fleet.interface import (
    Actor,
    Node,
    Pool,
    Tenant,
    audit_record,
    finish_after_open_seconds,
    pool_budgets,
    pool_windows,
)
from rollout import conf
from rollout.models import NodeUpgrade, Release, Rollout, RolloutEvent, RolloutWave, TickRequest
from rollout.services.controller import node_upgrades_roll_back, rollout_request_tick, wave_failures
from rollout.services.events import event_record
from rollout.services.plan import (
    PoolPlan,
    RolloutOptions,
    RolloutPlan,
    RolloutSpec,
    WavePlan,
    planned_waves,
    shuffle,
)
from rollout.services.transitions import (
    abort_rollout,
    cancel_pending_upgrades,
    pause_rollout,
    promote_rollout,
    resume_rollout,
    supersede_upgrades,
)

if TYPE_CHECKING:
    # django-stubs' placeholder for the AUTH_USER_MODEL (its mypy plugin resolves it).
    from django.contrib.auth.models import _User

log = structlog.get_logger("rollout")

BULK_BATCH = 5000


@dataclass(frozen=True)
class Snapshot:
    release: Release
    pools: list[Pool]
    nodes: list[tuple[UUID, UUID]]  # (node id, pool id)
    options: RolloutOptions


def _pool_uuids(values: tuple[str, ...]) -> list[UUID]:
    ids = []
    for value in values:
        try:
            ids.append(UUID(value))
        except ValueError as exc:
            raise InvalidInput(f"{value!r} is not a pool id.", code="unknown_pool", poolIds=[value]) from exc
    return list(dict.fromkeys(ids))


def _snapshot(*, tenant: Tenant, spec: RolloutSpec) -> Snapshot:
    """Every check of CONTRACT 4.4 the spec leaves, in order, and the nodes a rollout would take."""
    if not conf.options().downloads_url:
        raise Unavailable(
            "No downloads URL is configured: set ROLLOUT_DOWNLOADS_URL before creating rollouts.",
            code="no_downloads_url",
        )
    release = Release.objects.filter(version=spec.version).prefetch_related("binaries").first()
    if release is None:
        raise InvalidInput(f"No registered release has version {spec.version!r}.", code="unknown_version")
    if spec.pool_ids is None:
        pools = list(Pool.objects.filter(tenant=tenant).order_by("id"))
    else:
        wanted = _pool_uuids(spec.pool_ids)
        pools = list(Pool.objects.filter(tenant=tenant, id__in=wanted).order_by("id"))
        unknown = sorted(str(pid) for pid in set(wanted) - {pool.id for pool in pools})
        if unknown:
            raise InvalidInput(f"Unknown pool(s): {', '.join(unknown)}.", code="unknown_pool", poolIds=unknown)
    nodes = list(Node.objects.filter(pool__in=pools).values_list("id", "pool_id"))
    if not nodes:
        raise InvalidInput("The chosen pools have no nodes.", code="no_nodes")
    snapshot = Snapshot(release=release, pools=pools, nodes=nodes, options=spec.options)
    conflicts = _conflicts(snapshot)
    if conflicts:
        _raise_conflict(conflicts)
    return snapshot


def _conflicts(snapshot: Snapshot) -> list[str]:
    """Nodes of the snapshot that another active or paused rollout holds (CONTRACT 4.4)."""
    taken = NodeUpgrade.objects.filter(
        claims_node=True, node__pool__in=snapshot.pools, rollout__state__in=Rollout.ACTIVE_STATES
    ).values_list("node_id", flat=True)
    return sorted(str(node_id) for node_id in taken)


def _raise_conflict(node_ids: list[str]) -> None:
    raise Conflict(f"{len(node_ids)} node(s) are already in an active rollout.", code="conflict", nodeIds=node_ids)


def rollout_plan(*, tenant: Tenant, spec: RolloutSpec) -> RolloutPlan:
    """A dry run: every check of rollout_create, and the plan it would follow. Writes nothing.

    Per-pool counts are those of one seeded shuffle; a real create draws its own
    id and so its own shuffle, so each wave's per-pool counts may differ by a
    node or two, while each wave's total is exact.
    """
    snapshot = _snapshot(tenant=tenant, spec=spec)
    options = snapshot.options
    pool_of = dict(snapshot.nodes)
    order = shuffle(list(pool_of), seed=uuid.uuid4())
    budgets = pool_budgets(pool_ids=[pool.id for pool in snapshot.pools])
    windows = pool_windows(pool_ids=[pool.id for pool in snapshot.pools])
    start = timezone.now()
    cursor: datetime | None = start  # when the wave being planned ends (None: never)
    waves: list[WavePlan] = []
    for wave in planned_waves(options.waves, len(order)):
        per_pool = Counter(str(pool_of[node_id]) for node_id in order[wave.start : wave.end])
        allowed = {pool_id: budgets[UUID(pool_id)].allowed for pool_id in per_pool}
        if cursor is None or not all(allowed.values()):
            cursor = None  # a pool with a budget of 0 never starts a node
        else:
            began = cursor + timedelta(seconds=options.soak_seconds if wave.index else 0)
            # Each pool's rounds of whole timeouts, counted in its open hours only (CONTRACT 9.1):
            # see docs/controller.md for what this approximation over- and under-counts.
            cursor = max(
                finish_after_open_seconds(
                    windows[UUID(pid)], began, math.ceil(count / allowed[pid]) * options.upgrade_timeout_seconds
                )
                for pid, count in per_pool.items()
            )
        waves.append(WavePlan(index=wave.index, percent=wave.percent, total=wave.total, pools=dict(per_pool)))
    estimate = None if cursor is None else math.ceil((cursor - start).total_seconds())
    return RolloutPlan(
        version=snapshot.release.version,
        pool_ids=[str(pool.id) for pool in snapshot.pools],
        nodes=len(order),
        waves=waves,
        budgets={str(pid): PoolPlan(allowed=b.allowed, in_use=b.disrupted) for pid, b in budgets.items()},
        options=options,
        estimated_seconds=estimate,
    )


def rollout_create(
    *,
    tenant: Tenant,
    spec: RolloutSpec,
    created_by: _User | None = None,
    actor: Actor | None = None,
) -> Rollout:
    """Snapshot the nodes, shuffle them by the rollout id, split them into waves: in one transaction."""
    now = timezone.now()
    with transaction.atomic():
        snapshot = _snapshot(tenant=tenant, spec=spec)
        options = snapshot.options
        rollout = Rollout.objects.create(
            tenant=tenant,
            release=snapshot.release,
            waves=list(options.waves),
            max_failure_ratio=options.max_failure_ratio,
            soak_seconds=options.soak_seconds,
            upgrade_timeout_seconds=options.upgrade_timeout_seconds,
            failure_ratio_min_settled=options.failure_ratio_min_settled,
            state=Rollout.State.ACTIVE,
            current_wave=0,
            created_by=created_by,
            created_at=now,
        )
        rollout.pools.set(snapshot.pools)
        TickRequest.objects.create(rollout=rollout)
        pool_of = dict(snapshot.nodes)
        order = shuffle(list(pool_of), seed=rollout.id)
        waves_planned = planned_waves(options.waves, len(order))
        RolloutWave.objects.bulk_create(
            RolloutWave(
                rollout=rollout,
                index=wave.index,
                percent=wave.percent,
                total=wave.total,
                started_at=now if wave.index == 0 else None,
            )
            for wave in waves_planned
        )
        wave_of_position = [wave.index for wave in waves_planned for _ in range(wave.total)]
        # An aborted rollout's nodes still in flight give way to this one (a fix-forward).
        supersede_upgrades(node_ids=list(pool_of), at=now)
        try:
            with transaction.atomic():
                NodeUpgrade.objects.bulk_create(
                    (
                        NodeUpgrade(
                            rollout=rollout,
                            node_id=node_id,
                            pool_id=pool_of[node_id],
                            wave=wave_of_position[position],
                            position=position,
                            target_version=snapshot.release.version,
                        )
                        # Inserted in node id order (positions stay shuffled): two creates over the
                        # same nodes then meet at the one-writer index in the same order, and one
                        # waits for the other instead of deadlocking.
                        for position, node_id in sorted(enumerate(order), key=lambda item: item[1].int)
                    ),
                    batch_size=BULK_BATCH,
                )
        except IntegrityError:
            # Another rollout took a node between the check and the insert: the
            # partial unique index refused it. Report which, and write nothing.
            _raise_conflict(_conflicts(snapshot) or sorted(str(n) for n in pool_of))
        event_record(
            rollout=rollout,
            kind=RolloutEvent.Kind.CREATED,
            at=now,
            nodes=len(order),
            waves=[wave.total for wave in waves_planned],
            poolIds=[str(pool.id) for pool in snapshot.pools],
        )
        rollout_request_tick(rollout_id=rollout.id)
        _audit(
            rollout,
            actor,
            "rollout.create",
            after={
                "version": snapshot.release.version,
                "state": rollout.state,
                "poolIds": [str(pool.id) for pool in snapshot.pools],
                "waves": list(options.waves),
                "maxFailureRatio": options.max_failure_ratio,
                "soakSeconds": options.soak_seconds,
                "upgradeTimeoutSeconds": options.upgrade_timeout_seconds,
                "failureRatioMinSettled": options.failure_ratio_min_settled,
                "nodes": len(order),
            },
        )
    return rollout


def _audit(rollout: Rollout, actor: Actor | None, action: str, **changes: dict[str, Any] | None) -> None:
    """The operator's action in the tenant's audit trail, in the transaction that made it."""
    audit_record(
        tenant=rollout.tenant, actor=actor, action=action, object_type="rollout", object_id=rollout.pk, **changes
    )


def _event_actor(actor: Actor | None) -> str:
    """Who the rollout event names: "api:alice", "admin:root", or "operator" for direct calls."""
    return str(actor) if actor is not None else "operator"


def _state(rollout: Rollout) -> dict[str, Any]:
    return {"state": rollout.state, "pausedReason": rollout.paused_reason}


def _locked(*, tenant: Tenant | None, rollout_id: UUID | str) -> Rollout:
    """The rollout, row-locked (waits for a running tick), or NotFound (also for another tenant's)."""
    queryset = Rollout.objects.select_for_update().select_related("release")
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    try:
        return queryset.get(pk=rollout_id)
    except (Rollout.DoesNotExist, ValueError) as exc:
        raise NotFound("No such rollout.", code="not_found") from exc


def rollout_pause(*, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None) -> Rollout:
    """active -> paused. In-flight nodes still settle; nothing new starts."""
    with transaction.atomic():
        rollout = _locked(tenant=tenant, rollout_id=rollout_id)
        before = _state(rollout)
        pause_rollout(
            rollout=rollout, reason=Rollout.PausedReason.OPERATOR, at=timezone.now(), actor=_event_actor(actor)
        )
        _audit(rollout, actor, "rollout.pause", before=before, after=_state(rollout))
    return rollout


def rollout_resume(*, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None) -> Rollout:
    """paused -> active. Failures seen so far in the current wave are accepted; only new ones re-pause."""
    with transaction.atomic():
        rollout = _locked(tenant=tenant, rollout_id=rollout_id)
        acknowledged = rollout.acknowledged_failures
        before = _state(rollout)
        if rollout.state == Rollout.State.PAUSED and rollout.paused_reason == Rollout.PausedReason.FAILURE_RATIO:
            # The operator saw these failures and chose to go on; failures that came while
            # an operator's pause was on were seen by no one, and are judged as usual.
            acknowledged = wave_failures(rollout)
        resume_rollout(
            rollout=rollout, at=timezone.now(), acknowledged_failures=acknowledged, actor=_event_actor(actor)
        )
        rollout_request_tick(rollout_id=rollout.id)
        _audit(rollout, actor, "rollout.resume", before=before, after=_state(rollout))
    return rollout


def rollout_promote(*, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None) -> Rollout:
    """End the current wave's soak now (CONTRACT 9.4): the next wave starts at the next tick.

    409 ``invalid_state`` unless the rollout is active and its current wave is soaking.
    """
    with transaction.atomic():
        rollout = _locked(tenant=tenant, rollout_id=rollout_id)
        before = {"currentWave": rollout.current_wave, "nextWaveAt": rollout.next_wave_at}
        promote_rollout(rollout=rollout, at=timezone.now(), actor=_event_actor(actor))
        # The tick that starts the next wave (rollout.wave), right after this commit.
        rollout_request_tick(rollout_id=rollout.id)
        _audit(
            rollout,
            actor,
            "rollout.promote",
            before=before,
            after={"currentWave": rollout.current_wave, "nextWaveAt": rollout.next_wave_at},
        )
    return rollout


def rollout_abort(
    *, rollout_id: UUID | str, tenant: Tenant | None = None, rollback: bool = False, actor: Actor | None = None
) -> Rollout:
    """active|paused -> aborted. Pending nodes are cancelled.

    With ``rollback``, in-flight nodes go back to their previous section when
    that release is registered (rolled_back); otherwise they stay in flight
    with a reason. Without it, in-flight nodes go on and settle as usual.
    Succeeded nodes are never touched, nor nodes whose agent already runs the
    target version (they succeed).
    """
    if not isinstance(rollback, bool):
        raise InvalidInput("rollback must be true or false.", code="invalid_input", field="rollback")
    with transaction.atomic():
        rollout = _locked(tenant=tenant, rollout_id=rollout_id)
        if rollout.state in Rollout.TERMINAL_STATES:
            raise InvalidState(f"A {rollout.state} rollout cannot be aborted.", state=rollout.state)
        now = timezone.now()
        before = _state(rollout)
        cancelled = cancel_pending_upgrades(rollout=rollout, at=now)
        rolled_back, kept = node_upgrades_roll_back(rollout=rollout, now=now) if rollback else (0, 0)
        abort_rollout(
            rollout=rollout,
            at=now,
            actor=_event_actor(actor),
            rollback=rollback,
            cancelled=cancelled,
            rolledBack=rolled_back,
            notRolledBack=kept,
        )
        _audit(rollout, actor, "rollout.abort", before=before, after={**_state(rollout), "rollback": rollback})
    return rollout


def rollouts_for(*, tenant: Tenant, states: Sequence[str] | None = None) -> QuerySet[Rollout]:
    queryset = Rollout.objects.filter(tenant=tenant).select_related("release").prefetch_related("pools")
    if states:
        queryset = queryset.filter(state__in=states)
    return queryset.order_by("-created_at")
