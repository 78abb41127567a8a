"""Many writers at once never exceed a pool's budget: the Pool row lock serialises count-then-write."""

import threading
from decimal import Decimal

import pytest
from django.db import connection, connections

from core.errors import Conflict
from fleet.models import Workflow
from fleet.services.budget import pool_budget
from fleet.services.workflows import workflow_start
from tests.fleet.conftest import make_nodes, make_pool

THREADS = 8
ATTEMPTS = 4


def _race(target, args_per_thread):
    barrier = threading.Barrier(len(args_per_thread))
    results, errors = [], []

    def run(args):
        try:
            barrier.wait(timeout=10)
            for arg in args:
                try:
                    results.append(target(arg))
                except Conflict as exc:
                    results.append(exc.code)
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(args,)) for args in args_per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_workflow_starts_never_exceed_the_budget(tenant):
    assert connection.vendor == "postgresql", "this test proves a PostgreSQL locking claim"
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
