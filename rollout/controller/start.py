"""Starting nodes within each pool's budget: the current wave's pending nodes, and convergence after completion.

The start step executes the rollout's plan (rollout/controller/plan.py decides who starts, who is
skipped and who waits, and why). Under each pool's row lock, taken in pool id order by every worker,
so two workers starting at once never exceed a budget (docs/controller.md#the-tick).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from fleet.interface import (
    Command,
    Node,
    commands_enqueue,
    online_node_q,
    pool_budget,
    pool_budgets,
    pool_windows_open,
)
from rollout.controller.daemons import SignedRelease, min_protocol_version, set_daemons, signed_releases
from rollout.controller.decide import StartStep, pool_turns
from rollout.controller.decisions import Decision, Move
from rollout.controller.timeouts import timeouts_due_arm_safely
from rollout.controller.turns import Candidate, PoolPlan, pool_rows
from rollout.controller.upgrade_transitions import (
    converge_upgrades,
    skip_upgrades,
    start_upgrades,
)
from rollout.models import NodeUpgrade, Release, ReleaseBinary, ReleaseBlock, Rollout

log = structlog.get_logger("rollout")

State = NodeUpgrade.State


@dataclass
class StartPlan:
    """The start step of one tick as data: the wave it starts from, its closed pools, and each open pool's plan."""

    wave: int
    #: Pools with pending rows that are outside their maintenance windows: pool id -> next opening.
    closed: dict[UUID, datetime] = field(default_factory=dict)
    pools: dict[UUID, PoolPlan] = field(default_factory=dict)
    #: Rows that actually moved to in flight (a row another worker moved meanwhile is not counted).
    started: int = 0

    def decided(self) -> dict[int, Decision]:
        """{row id: decision} for every row the tick reached."""
        return {row.id: decision for plan in self.pools.values() for row, decision in plan.turns}

    @property
    def skipped(self) -> int:
        return sum(len(plan.moves(Move.SKIP)) for plan in self.pools.values())


def start_apply(*, rollout: Rollout, step: StartStep, now: datetime) -> tuple[StartPlan, bool]:
    """Apply the decision's start step (rollout/controller/decide.py): under the open pools' row locks (taken in
    id order by one statement), each pool's turn (``decide.pool_turns``) within its free slots read there, the one
    fact another rollout changes; then skip and start. Returns the plan and whether every pending row was reached.
    """
    plan = StartPlan(wave=step.wave, closed=dict(step.closed))
    if not step.open:
        return plan, False
    pending = NodeUpgrade.objects.filter(rollout=rollout, wave=step.wave).pending()
    budgets = pool_budgets(pool_ids=step.open, lock=True)
    exhausted = True
    for pool_id in step.open:
        budget = budgets.get(pool_id)
        if budget is None:
            continue  # deleted meanwhile
        rows = pool_rows(pending.filter(pool_id=pool_id), room=budget.available, now=now)
        turns, reached = pool_turns(rows, room=budget.available, offline_is_down=step.offline_is_down)
        exhausted = exhausted and reached
        plan.pools[pool_id] = PoolPlan(pool_id=pool_id, budget=budget, turns=turns)
    _execute(rollout=rollout, plan=plan, now=now)
    return plan, exhausted


def _execute(*, rollout: Rollout, plan: StartPlan, now: datetime) -> None:
    """Skip and start what the plan says: one UPDATE per skip reason, one for the starts, then the specs."""
    skipped: dict[str, list[int]] = defaultdict(list)
    to_start: list[Candidate] = []
    for pool_plan in plan.pools.values():
        for row, decision in pool_plan.turns:
            if decision.move == Move.SKIP and decision.reason is not None:
                skipped[decision.reason].append(row.id)
            elif decision.move == Move.START:
                to_start.append(row)
    for reason, ids in skipped.items():
        skip_upgrades(rollout=rollout, ids=ids, reason=reason, at=now)
    if not to_start:
        return
    # Start time is read under every pool lock: a node is never recorded as started before
    # the settle that freed its slot committed. One time for the tick: one UPDATE, one sweep.
    started_at = max(now, timezone.now())
    deadline = started_at + timedelta(seconds=rollout.upgrade_timeout_seconds)
    plan.started = start_upgrades(
        rollout=rollout, starts=[(row.id, row.node_id) for row in to_start], started_at=started_at, deadline=deadline
    )
    _timeouts_due(rollout_id=rollout.id, at=deadline)
    if not plan.started:
        return
    release = rollout.release
    signed = SignedRelease(
        version=release.version,
        envelope=release.envelope,
        sha256_by_arch=dict(ReleaseBinary.objects.filter(release=release).values_list("arch", "sha256")),
    )
    minimum_protocol = min_protocol_version()
    sections: list[tuple[UUID, dict[str, Any]]] = []
    old_agents: list[tuple[UUID, dict[str, Any]]] = []
    for row in to_start:
        section = signed.section(row.arch)
        assert section is not None  # the plan starts only rows whose arch has a binary
        sections.append((row.node_id, section))
        if (row.protocol_version or 0) < minimum_protocol:
            old_agents.append((row.node_id, section))
    _send_out(sections=sections, old_agents=old_agents)


def _timeouts_due(*, rollout_id: UUID, at: datetime) -> None:
    """After the commit, the rollout's one timeouts-due message is due at ``at`` or sooner (not one per start
    time, nor per node: rollout/controller/timeouts.py)."""
    transaction.on_commit(lambda: timeouts_due_arm_safely(rollout_id=rollout_id, at=at))


def _send_out(*, sections: list[tuple[UUID, dict[str, Any]]], old_agents: list[tuple[UUID, dict[str, Any]]]) -> None:
    """Started nodes get their spec.daemon; agents below the minimum protocol also a daemon.upgrade command."""
    set_daemons(sections)
    if old_agents:
        commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)


# --- convergence after completion (docs/controller.md#convergence-after-completion) ----------


def convergence_candidates(*, now: datetime) -> QuerySet[NodeUpgrade]:
    """Rows that converge: skipped (offline) in a completed rollout, node online again on an older version.

    Not when a newer rollout has a row for the node (it took the node: this ends here), another
    row holds the node, the tenant blocked the release, the release expired (docs/signing.md#expiry)
    or has no binary for its arch.
    An older version: one that is not a registered release of the target's sequence or higher.
    """
    node = OuterRef("node_id")
    newer = NodeUpgrade.objects.filter(node_id=node, rollout__created_at__gt=OuterRef("rollout__created_at"))
    claimed = NodeUpgrade.objects.filter(node_id=node, claims_node=True)
    not_older = Release.objects.filter(
        version=OuterRef("node__session__daemon_version"), sequence__gte=OuterRef("rollout__release__sequence")
    )
    blocked = ReleaseBlock.objects.blocking(
        tenant=OuterRef("rollout__tenant_id"), release=OuterRef("rollout__release_id")
    )
    binary = ReleaseBinary.objects.filter(release_id=OuterRef("rollout__release_id"), arch=OuterRef("node__arch"))
    return (
        NodeUpgrade.objects.filter(
            state=State.SKIPPED, reason=NodeUpgrade.Reason.OFFLINE, rollout__state=Rollout.State.COMPLETED
        )
        .exclude(Release.expired_q(now, prefix="rollout__release__"))
        .filter(Exists(Node.objects.filter(online_node_q(now=now), pk=node)), Exists(binary))
        .exclude(Exists(newer))
        .exclude(Exists(claimed))
        .exclude(Exists(not_older))
        .exclude(Exists(blocked))
    )


def rollouts_converge(*, now: datetime) -> int:
    """Upgrade the nodes of completed rollouts that come back (``convergence_candidates``), within budgets.

    Per pool, in id order, under the pool's row lock (``pool_budget(lock=True)``, as
    ``start_apply``): two workers converging at once never exceed a budget.
    The candidates are read again under the lock. Returns the nodes started.
    """
    pool_ids = sorted(set(convergence_candidates(now=now).values_list("pool_id", flat=True).order_by()))
    started = 0
    open_now = pool_windows_open(pool_ids=pool_ids, now=now)  # docs/controller.md#maintenance-windows
    for pool_id in pool_ids:
        if pool_id not in open_now:
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
    releases = signed_releases(ids={row["rollout__release_id"] for row in rows})
    by_rollout: dict[UUID, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rollout[row["rollout_id"]].append(row)
    started = 0
    for rollout_id, group in by_rollout.items():
        deadline = started_at + timedelta(seconds=group[0]["rollout__upgrade_timeout_seconds"])
        moved = _converge_batch(rollout_id, group, releases=releases, started_at=started_at, deadline=deadline)
        if moved is None and len(group) > 1:
            # A new rollout took one of the nodes meanwhile: row by row, only the refused ones are left out.
            batches = ([row] for row in group)
            moved = sum(
                _converge_batch(rollout_id, batch, releases=releases, started_at=started_at, deadline=deadline) or 0
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
    releases: Mapping[str, SignedRelease],
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
            section = releases[row["target_version"]].section(row["node__arch"])
            assert section is not None  # a candidate's release has a binary for its arch
            sections.append((row["node_id"], section))
            if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                old_agents.append((row["node_id"], section))
        _send_out(sections=sections, old_agents=old_agents)
    return moved
