"""Many writers at once never exceed a pool's budget: the Pool row lock serialises count-then-write."""

from decimal import Decimal

import pytest
from django.db import OperationalError, connection, transaction

from core.errors import Conflict
from fleet.models import Workflow
from fleet.services.budget import pool_budget, pool_budgets
from fleet.services.workflows import workflow_start
from tests.concurrency import run_together
from tests.fleet.conftest import make_nodes, make_pool

THREADS = 8
ATTEMPTS = 4


def _race(target, args_per_thread):
    """One thread per list of arguments, released together; each result, or the Conflict's code."""
    results = []

    def run(args):
        for arg in args:
            try:
                results.append(target(arg))
            except Conflict as exc:
                results.append(exc.code)

    errors = run_together(*(lambda args=args: run(args) for args in args_per_thread))
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_workflow_starts_never_exceed_the_budget(tenant):
    pool = make_pool(tenant, budget=Decimal("0.1"))
    nodes = make_nodes(pool, THREADS * ATTEMPTS)  # 32 nodes, allowed = ceil(3.2) = 4
    batches = [nodes[i * ATTEMPTS : (i + 1) * ATTEMPTS] for i in range(THREADS)]

    results = _race(lambda node: workflow_start(tenant=tenant, node_id=node.id, kind="remediation"), batches)

    started = [r for r in results if isinstance(r, Workflow)]
    assert len(started) == 4
    assert results.count("budget_exhausted") == THREADS * ATTEMPTS - 4
    assert Workflow.objects.filter(state="active").count() == 4
    budget = pool_budget(pool_id=pool.id)
    assert (budget.allowed, budget.disrupted, budget.available) == (4, 4, 0)


@pytest.mark.django_db(transaction=True)
def test_concurrent_starts_on_one_node_give_one_workflow(tenant):
    pool = make_pool(tenant, budget=Decimal("1"))
    (node,) = make_nodes(pool, 1)

    results = _race(lambda _: workflow_start(tenant=tenant, node_id=node.id, kind="remediation"), [[None]] * THREADS)

    assert sum(isinstance(r, Workflow) for r in results) == 1
    assert results.count("workflow_active") == THREADS - 1
    assert Workflow.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_budgets_read_with_lock_hold_every_pool_until_the_transaction_ends(tenant):
    """The controller's start step counts many pools at once (``pool_budgets(lock=True)``): until it commits, a
    workflow start on any of them waits, as it would for ``pool_budget(lock=True)``."""
    pools = [make_pool(tenant, "gpu-a", "1"), make_pool(tenant, "gpu-b", "1")]
    nodes = [make_nodes(pool, 1, prefix=pool.name)[0] for pool in pools]
    with transaction.atomic():
        budgets = pool_budgets(pool_ids=[pool.id for pool in reversed(pools)], lock=True)
        assert [budgets[pool.id].allowed for pool in pools] == [1, 1]
        results = _race(lambda node: _start_within(node, seconds=0.5), [nodes])
        assert results == ["lock_timeout", "lock_timeout"]
    assert all(isinstance(_start_within(node, seconds=5), Workflow) for node in nodes)


def _start_within(node, *, seconds: float):
    """A workflow start on another connection that gives up waiting for a lock after ``seconds``."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(seconds * 1000)}ms"])
        try:
            with transaction.atomic():
                return workflow_start(tenant=node.tenant, node_id=node.id, kind="remediation")
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
                raise
            return "lock_timeout"
