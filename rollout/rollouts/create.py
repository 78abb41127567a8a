"""Creating a rollout (and its dry run): every check (docs/api.md#rollouts), the snapshot, the seeded waves."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from core.errors import InvalidInput, Unavailable
from fleet.interface import (
    Actor,
    Node,
    Pool,
    Selector,
    Tenant,
    finish_after_open_seconds,
    pool_budgets,
    pool_windows,
    selector_q,
)
from rollout import conf
from rollout.controller.events import Created, event_record
from rollout.controller.gate_evaluation import gates_first_look
from rollout.controller.takeover import rollout_take_over
from rollout.controller.tick_requests import rollout_request_tick
from rollout.controller.transitions import supersede_rollout
from rollout.controller.upgrade_transitions import (
    supersede_upgrades,
)
from rollout.gates.verdicts import gates_create
from rollout.models import NodeUpgrade, Release, ReleaseBlock, Rollout, RolloutWave, TickRequest, start_ahead
from rollout.rollouts.create_checks import (
    Taken,
    binaries_require_stored,
    conflict_raise,
    nodes_eligible,
    sequence_rollback,
)
from rollout.rollouts.snapshot_rows import insert_upgrades
from rollout.rollouts.spec import (
    PoolPlan,
    RolloutOptions,
    RolloutPlan,
    RolloutSpec,
    WavePlan,
    planned_waves,
)
from rollout.rollouts.supersede import FirstNodes, first_nodes, supersede_order, supersede_target

if TYPE_CHECKING:
    # django-stubs' placeholder for the AUTH_USER_MODEL (its mypy plugin resolves it).
    from django.contrib.auth.models import _User
from rollout.rollouts.actions import audit_rollout, event_actor

log = structlog.get_logger("rollout")

ECHOED_IDS = 10  # unknown ids named in an error body


@dataclass(frozen=True)
class Snapshot:
    release: Release
    pools: list[Pool]
    nodes: list[tuple[UUID, UUID]]  # (node id, pool id)
    options: RolloutOptions
    #: ``nodes`` as a query: another rollout's hold on any of them is a conflict (``_conflicts``).
    node_query: QuerySet[Node] = field(compare=False)
    #: Nodes left out because they run a release of a higher sequence (``excluded.newer``).
    excluded_newer: int = 0
    selector: Selector | None = None
    #: Pools some of whose nodes the snapshot left out (the selector's, or newer): their default version stays
    #: (docs/api.md#rollouts).
    partly_covered: tuple[str, ...] = ()
    #: The rollout it supersedes (``supersedes``), checked; its nodes go first (rollout/rollouts/supersede.py).
    superseded: Rollout | None = None
    first: FirstNodes | None = None


def _pool_uuids(values: tuple[str, ...]) -> list[UUID]:
    ids = []
    for value in values:
        try:
            ids.append(UUID(value))
        except ValueError as exc:
            raise InvalidInput(f"{value!r} is not a pool id.", code="unknown_pool", poolIds=[value]) from exc
    return list(dict.fromkeys(ids))


def _snapshot(*, tenant: Tenant, spec: RolloutSpec, lock: bool = False) -> Snapshot:
    """Every check of a create the spec leaves, in order, and the nodes a rollout would take.

    See docs/controller.md#create."""
    if not conf.options().downloads_url:
        raise Unavailable(
            "No downloads URL is configured: set ROLLOUT_DOWNLOADS_URL before creating rollouts.",
            code="no_downloads_url",
        )
    release = Release.objects.filter(version=spec.version).prefetch_related("binaries").first()
    if release is None:
        raise InvalidInput(f"No registered release has version {spec.version!r}.", code="unknown_version")
    if ReleaseBlock.objects.blocking(tenant=tenant, release=release).exists():
        raise InvalidInput(f"Release {spec.version} is blocked in this tenant.", code="release_blocked")
    if release.expired_at(timezone.now()):
        raise InvalidInput(f"Release {spec.version} has expired: no node may start on it.", code="release_expired")
    superseded = None
    if spec.supersedes is not None:
        superseded = supersede_target(tenant=tenant, rollout_id=spec.supersedes, release=release, lock=lock)
    if spec.pool_ids is None:
        pools = list(Pool.objects.filter(tenant=tenant).order_by("id"))
    else:
        wanted = _pool_uuids(spec.pool_ids)
        pools = list(Pool.objects.filter(tenant=tenant, id__in=wanted).order_by("id"))
        unknown = sorted(str(pid) for pid in set(wanted) - {pool.id for pool in pools})
        if unknown:
            # A few are enough to find the mistake; echoing thousands would bloat the error.
            shown = unknown[:ECHOED_IDS]
            more = f" and {len(unknown) - len(shown)} more" if len(unknown) > len(shown) else ""
            raise InvalidInput(f"Unknown pool(s): {', '.join(shown)}{more}.", code="unknown_pool", poolIds=shown)
    chosen = Node.objects.filter(pool__in=pools)
    if spec.selector is not None:
        chosen = chosen.filter(selector_q(spec.selector))
    eligible = nodes_eligible(candidates=chosen, release=release)
    nodes = list(eligible.nodes.values_list("id", "pool_id"))
    if not nodes and eligible.newer:
        raise sequence_rollback(release)
    if not nodes:
        matching = " matching the selector" if spec.selector is not None else ""
        raise InvalidInput(f"The chosen pools have no nodes{matching}.", code="no_nodes")
    binaries_require_stored(release=release, nodes=eligible.nodes)
    snapshot = Snapshot(
        release=release,
        pools=pools,
        nodes=nodes,
        options=spec.options,
        node_query=eligible.nodes,
        excluded_newer=eligible.newer,
        selector=spec.selector,
        partly_covered=_partly_covered(pools, nodes),
        superseded=superseded,
        first=None if superseded is None else first_nodes(superseded=superseded, nodes=eligible.nodes),
    )
    conflicts = _conflicts(snapshot)
    if conflicts:
        conflict_raise(conflicts)
    return snapshot


def _partly_covered(pools: list[Pool], nodes: list[tuple[UUID, UUID]]) -> tuple[str, ...]:
    """The pools of which the snapshot holds some nodes but not every one (one counting query)."""
    taken = Counter(pool_id for _, pool_id in nodes)
    everyone = dict(Node.objects.filter(pool__in=pools).values_list("pool_id").annotate(n=Count("id")).order_by())
    return tuple(sorted(str(pool_id) for pool_id, n in taken.items() if n < everyone.get(pool_id, 0)))


def _conflicts(snapshot: Snapshot) -> Taken | None:
    """Nodes of the snapshot that another rollout holds (409 ``conflict``, docs/api.md#rollouts): only those, so
    that another rollout may hold the nodes a selector, or a newer release, leaves out.

    Holding: active, paused, scheduled or awaiting approval (``Rollout.HOLDING_STATES``)."""
    holding = NodeUpgrade.objects.filter(claims_node=True, rollout__state__in=Rollout.HOLDING_STATES)
    if snapshot.superseded is not None:  # its nodes are the new rollout's to take
        holding = holding.exclude(rollout=snapshot.superseded)
    taken = holding.filter(node__in=snapshot.node_query.values("id"))
    return Taken.of(taken.values_list("node_id", "rollout_id", "rollout__state"))


def rollout_plan(*, tenant: Tenant, spec: RolloutSpec) -> RolloutPlan:
    """A dry run: every check of rollout_create, and the plan it would follow. Writes nothing.

    Per-pool counts are those of one seeded shuffle; a real create draws its own
    id and so its own shuffle, so each wave's per-pool counts may differ by a
    node or two, while each wave's total is exact.
    """
    looks = gates_first_look(options=spec.gates)  # the create's own checks of its gates, outside any transaction
    snapshot = _snapshot(tenant=tenant, spec=spec)
    options = snapshot.options
    pool_of = dict(snapshot.nodes)
    order = supersede_order(list(pool_of), seed=uuid.uuid4(), first=snapshot.first)
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
            per_round = options.upgrade_timeout_seconds + options.min_ready_seconds  # readiness after arrival
            began = cursor + timedelta(seconds=options.soak_seconds if wave.index else 0)
            # Each pool's rounds of whole timeouts, counted in its open hours only (docs/controller.md#create):
            # the same section says what this approximation over- and under-counts.
            cursor = max(
                finish_after_open_seconds(windows[UUID(pid)], began, math.ceil(count / allowed[pid]) * per_round)
                for pid, count in per_pool.items()
            )
        waves.append(WavePlan(index=wave.index, percent=wave.percent, total=wave.total, pools=dict(per_pool)))
    estimate = None if cursor is None else math.ceil((cursor - start).total_seconds())
    return RolloutPlan(
        version=snapshot.release.version,
        pool_ids=[str(pool.id) for pool in snapshot.pools],
        selector=spec.selector_text,
        nodes=len(order),
        waves=waves,
        budgets={str(pid): PoolPlan(allowed=b.allowed, in_use=b.disrupted) for pid, b in budgets.items()},
        options=options,
        estimated_seconds=estimate,
        excluded_newer=snapshot.excluded_newer,
        schedule=spec.schedule,
        gates=spec.gates,
        gate_looks=tuple(looks),
        supersedes=None if snapshot.superseded is None else str(snapshot.superseded.id),
    )


def rollout_create(
    *,
    tenant: Tenant,
    spec: RolloutSpec,
    created_by: _User | None = None,
    actor: Actor | None = None,
) -> Rollout:
    """Snapshot the nodes, shuffle them by the rollout id, split them into waves: in one transaction.

    In a tenant that requires approvals the rollout awaits them (docs/controller.md#approvals): its
    nodes are held, nothing starts, no wave has started.
    """
    # Prometheus is asked before the transaction that takes the nodes (never the network under its locks).
    first_looks = gates_first_look(options=spec.gates)
    now = timezone.now()
    with transaction.atomic():
        snapshot = _snapshot(tenant=tenant, spec=spec, lock=True)
        superseded_state = snapshot.superseded.state if snapshot.superseded is not None else None
        # A startAt ahead: the nodes are held now, nothing starts before then (docs/controller.md#schedules).
        scheduled = start_ahead(spec.schedule.start_at, at=now)
        options = snapshot.options
        approvals_required = tenant.rollout_approvals
        starts_now = approvals_required == 0
        rollout = Rollout.objects.create(
            tenant=tenant,
            release=snapshot.release,
            waves=list(options.waves),
            max_failure_ratio=options.max_failure_ratio,
            soak_seconds=options.soak_seconds,
            upgrade_timeout_seconds=options.upgrade_timeout_seconds,
            min_ready_seconds=options.min_ready_seconds,
            failure_ratio_min_settled=options.failure_ratio_min_settled,
            gate_interval_seconds=spec.gates.interval_seconds,
            gate_failure_limit=spec.gates.failure_limit,
            excluded_newer=snapshot.excluded_newer,
            selector=spec.selector_text,
            partly_covered_pool_ids=list(snapshot.partly_covered),
            # Approvals first (docs/controller.md#approvals); approved, a rollout whose startAt is ahead is scheduled.
            state=Rollout.State.AWAITING_APPROVAL
            if not starts_now
            else Rollout.State.SCHEDULED
            if scheduled
            else Rollout.State.ACTIVE,
            approvals_required=approvals_required,
            start_at=spec.schedule.start_at,
            end_by=spec.schedule.end_by,
            end_behavior=spec.schedule.end_behavior,
            current_wave=0,
            created_by=created_by,
            created_at=now,
            supersedes=snapshot.superseded,
        )
        rollout.pools.set(snapshot.pools)
        TickRequest.objects.create(rollout=rollout)
        gates_create(rollout=rollout, options=spec.gates, now=now, first=first_looks)
        pool_of = dict(snapshot.nodes)
        order = supersede_order(list(pool_of), seed=rollout.id, first=snapshot.first)
        waves_planned = planned_waves(options.waves, len(order))
        RolloutWave.objects.bulk_create(
            RolloutWave(
                rollout=rollout,
                index=wave.index,
                percent=wave.percent,
                total=wave.total,
                started_at=now if wave.index == 0 and starts_now and not scheduled else None,
            )
            for wave in waves_planned
        )
        wave_of_position = [wave.index for wave in waves_planned for _ in range(wave.total)]
        handed_over = []
        if snapshot.superseded is not None:
            handed_over = supersede_rollout(
                rollout=snapshot.superseded, by=rollout, node_ids=pool_of.keys(), at=now, actor=event_actor(actor)
            )
        # An aborted rollout's nodes still in flight give way to this one (a fix-forward).
        supersede_upgrades(tenant_id=tenant.id, node_ids=pool_of.keys(), at=now)
        try:
            with transaction.atomic():
                insert_upgrades(
                    rollout=rollout,
                    version=snapshot.release.version,
                    order=order,
                    pool_of=pool_of,
                    wave_of_position=wave_of_position,
                )
        except IntegrityError:
            # Another rollout took a node between the check and the insert: the
            # partial unique index refused it. Report which, and write nothing.
            conflict_raise(
                _conflicts(snapshot) or Taken(node_ids=sorted(str(n) for n in pool_of), rollout_ids=[], states=[])
            )
        if snapshot.superseded is not None and rollout.state == Rollout.State.ACTIVE:
            rollout_take_over(rollout=rollout, superseded=snapshot.superseded, node_ids=handed_over, at=now)
        created = Created(
            nodes=len(order),
            waves=[wave.total for wave in waves_planned],
            pool_ids=[str(pool.id) for pool in snapshot.pools],
            approvals_required=approvals_required or None,
            supersedes=None if snapshot.superseded is None else str(snapshot.superseded.id),
        )
        event_record(rollout=rollout, payload=created, at=now)
        rollout_request_tick(rollout_id=rollout.id)
        audit_rollout(
            rollout,
            actor,
            "rollout.create",
            after={
                "version": snapshot.release.version,
                "state": rollout.state,
                "poolIds": [str(pool.id) for pool in snapshot.pools],
                "selector": rollout.selector,
                "startAt": spec.schedule.start_at,
                "endBy": spec.schedule.end_by,
                "endBehavior": spec.schedule.end_behavior,
                "waves": list(options.waves),
                "maxFailureRatio": options.max_failure_ratio,
                "soakSeconds": options.soak_seconds,
                "upgradeTimeoutSeconds": options.upgrade_timeout_seconds,
                "minReadySeconds": options.min_ready_seconds,
                "failureRatioMinSettled": options.failure_ratio_min_settled,
                "gates": [gate.definition() for gate in spec.gates.gates],
                "gateIntervalSeconds": spec.gates.interval_seconds,
                "gateFailureLimit": spec.gates.failure_limit,
                "nodes": len(order),
                "approvalsRequired": approvals_required,
                "supersedes": None if snapshot.superseded is None else str(snapshot.superseded.id),
            },
        )
        if snapshot.superseded is not None:
            audit_rollout(
                snapshot.superseded,
                actor,
                "rollout.supersede",
                before={"state": superseded_state},
                after={"state": Rollout.State.SUPERSEDED, "supersededBy": str(rollout.id)},
            )
    return rollout
