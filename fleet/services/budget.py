"""The disruption budget: how many nodes of a pool may be disrupted at once.

    allowed   = ceil(disruptionBudget x nodes in pool)      (Decimal arithmetic)
    disrupted = DISTINCT nodes of the pool with an active workflow
                OR in any registered disruption source (rollout: upgrades in flight)
    available = max(0, allowed - disrupted)

Every writer that disrupts nodes of a pool (``workflow_start`` here, the rollout
controller's starts) calls ``pool_budget(pool_id=..., lock=True)`` (or, for several
pools at once, ``pool_budgets(pool_ids=..., lock=True)``) inside
``transaction.atomic()`` before it writes: the ``SELECT ... FOR NO KEY UPDATE`` on the
Pool row serialises count-then-write per pool, so two writers never both see the
last free slot (``NO KEY``: rows inserted meanwhile that reference the pool, which take
``KEY SHARE`` on it, need not wait). The count itself is one SQL statement whatever the pool's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from uuid import UUID

from django.db.models import Count, Q, Value

from core.errors import NotFound
from fleet.models import Node, Pool, Workflow
from fleet.plugins import disruption_sources


def budget_allowed(*, budget: Decimal, nodes: int) -> int:
    """ceil(budget x nodes), exact: Decimal("0.07") x 100 is 7, not 8."""
    if not isinstance(budget, Decimal):
        # A float goes through its shortest repr (0.07 -> "0.07"), never its binary expansion.
        budget = Decimal(str(budget))
    if nodes <= 0 or budget <= 0:
        return 0
    return int((budget * nodes).to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True)
class PoolBudget:
    pool_id: UUID
    nodes: int
    allowed: int
    disrupted: int
    #: Of ``disrupted`` (``pool_budgets(split=True)`` only, else None): nodes with an active workflow, and
    #: nodes a plug-in's disruption source names (rollout: its upgrades). A node in both counts in both.
    by_workflows: int | None = None
    by_sources: int | None = None
    available: int = field(init=False)  # max(0, allowed - disrupted)

    def __post_init__(self) -> None:
        object.__setattr__(self, "available", max(0, self.allowed - self.disrupted))


def _disruption_qs(pool_ids: list[UUID]) -> tuple[Q, Q | None]:
    """Q on Node: an active workflow in these pools; in a registered disruption source (None: no source)."""
    active_workflows = Workflow.objects.filter(pool_id__in=pool_ids, state=Workflow.State.ACTIVE).values("node_id")
    sources: Q | None = None
    for source in disruption_sources():
        for pool_id in pool_ids:
            q = Q(id__in=source(pool_id))
            sources = q if sources is None else sources | q
    return Q(id__in=active_workflows), sources


def disrupted_node_q(*, pool_ids: list[UUID]) -> Q:
    """A Q on Node: has an active workflow in these pools, or is in any disruption source."""
    workflows, sources = _disruption_qs(pool_ids)
    return workflows if sources is None else workflows | sources


_Counts = dict[UUID, tuple[int, int, int | None, int | None]]


def _counts(pool_ids: list[UUID], *, split: bool = False) -> _Counts:
    """{pool_id: (nodes, disrupted, by workflows, by sources)} in one grouped query (the split: None unless asked)."""
    workflows, sources = _disruption_qs(pool_ids)
    disrupted = workflows if sources is None else workflows | sources
    counts: dict[str, Count | Value] = {"nodes": Count("id"), "disrupted": Count("id", filter=disrupted)}
    if split:
        counts["by_workflows"] = Count("id", filter=workflows)
        counts["by_sources"] = Count("id", filter=sources) if sources is not None else Value(0)
    rows = Node.objects.filter(pool_id__in=pool_ids).values("pool_id").annotate(**counts).order_by()
    result: _Counts = {}
    for pool_id, nodes, disrupted_nodes, *by in rows.values_list("pool_id", *counts):
        by_workflows, by_sources = by if split else (None, None)
        result[pool_id] = (nodes, disrupted_nodes, by_workflows, by_sources)
    return result


def _pool_budget(pool_id: UUID, budget: Decimal, counts: _Counts) -> PoolBudget:
    nodes, disrupted, by_workflows, by_sources = counts.get(pool_id, (0, 0, 0, 0))
    return PoolBudget(
        pool_id=pool_id,
        nodes=nodes,
        allowed=budget_allowed(budget=budget, nodes=nodes),
        disrupted=disrupted,
        by_workflows=by_workflows,
        by_sources=by_sources,
    )


def pool_budget(*, pool_id: UUID, lock: bool = False) -> PoolBudget:
    """The pool's budget now: two queries.

    ``lock=True`` first takes ``SELECT ... FOR NO KEY UPDATE`` on the Pool row; the
    caller must be inside ``transaction.atomic()`` and keep the transaction
    open until it has written its disruption.
    """
    budgets = pool_budgets(pool_ids=[pool_id], lock=lock)
    if not budgets:
        raise NotFound(f"No pool {pool_id}.", code="unknown_pool")
    (budget,) = budgets.values()
    return budget


def pool_budgets(*, pool_ids: Iterable[UUID], split: bool = False, lock: bool = False) -> dict[UUID, PoolBudget]:
    """Budgets of many pools in two queries (admin, metrics, the controller's start step). Unknown ids are left out.

    ``split``: also count who disrupts (``by_workflows``, ``by_sources``), for the admin's sentences.
    ``lock=True``: as ``pool_budget(lock=True)`` for each pool, the rows locked in id order by one
    statement (the order every writer takes pool locks in), before anything is counted.
    """
    ids = list(dict.fromkeys(pool_ids))
    if not ids:
        return {}
    pools = Pool.objects.filter(pk__in=ids)
    if lock:
        pools = pools.select_for_update(no_key=True).order_by("id")
    budgets = dict(pools.values_list("id", "disruption_budget"))
    if not budgets:
        return {}
    counts = _counts(list(budgets), split=split)
    return {pool_id: _pool_budget(pool_id, budget, counts) for pool_id, budget in budgets.items()}
