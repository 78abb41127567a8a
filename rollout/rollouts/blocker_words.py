"""What holds a rollout, in plain words for an operator: the admin's "Waiting for" (docs/console.md).

The rollout's plan (rollout/controller/plan.py) rendered as rollout/rollouts/blockers.py renders it for
the API, in the operator's words, with the budget's split by disruption source.
"""

from __future__ import annotations

from datetime import datetime

from fleet.interface import pool_budgets
from rollout.controller.decisions import Code
from rollout.controller.plan import plan_at
from rollout.models import Rollout
from rollout.rollouts.blockers import at_words, no_controller_blocker, paused_why, window_phrase
from rollout.rollouts.reads import approval_counts


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def rollout_blocker_words(rollout: Rollout, *, now: datetime) -> str | None:
    """What holds the rollout, in plain words for an operator; None while nodes are moving.

    ``waiting for the 22:00 Europe/Berlin window (gpu-a)``, ``budget full in gpu-a: 3 of 3
    disrupted by 2 workflows and 1 upgrade``. A constant number of queries.
    """
    missing = no_controller_blocker(rollout, now=now)
    if missing is not None:
        return missing.detail
    plan = plan_at([rollout], now=now)
    held = plan.rollouts.get(rollout.id)
    if held is None or held.code is None:
        return None
    if held.code == Code.OUTSIDE_WINDOW:
        opens = held.opening.next_window_at if held.opening is not None else None
        phrase = window_phrase(held.opening) if held.opening and opens else "the next window"
        return f"waiting for {phrase} ({', '.join(pool.name for pool in held.pools)}), at {at_words(opens)}"
    if held.code == Code.BUDGET_FULL:
        # The budget's own split: besides workflows, its only disruption source is the rollouts' upgrades.
        split = pool_budgets(pool_ids=[pool.pool_id for pool in held.pools], split=True)
        return "; ".join(
            f"budget full in {pool.name}: {budget.disrupted} of {budget.allowed} disrupted by "
            f"{_count(budget.by_workflows or 0, 'workflow')} and {_count(budget.by_sources or 0, 'upgrade')}"
            for pool in held.pools
            if (budget := split.get(pool.pool_id)) is not None
        )
    if held.code == Code.PAUSED:
        return f"paused: {paused_why(held.paused_reason)}"
    if held.code == Code.GATE and held.gate is not None:
        return f"held by gate {held.gate.name} ({held.gate.state})"
    if held.code == Code.AWAITING_NODES:
        return f"waiting for {_count(held.in_flight, 'node')} in flight"
    if held.code == Code.SOAKING:
        return f"soaking until {at_words(held.soak_until)}"
    if held.code == Code.SCHEDULED:
        return f"scheduled to start at {at_words(rollout.start_at)}"
    approvals = approval_counts([rollout]).get(rollout.id, 0)
    return f"awaiting approval: {approvals} of {rollout.approvals_required}"
