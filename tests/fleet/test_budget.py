from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core.errors import NotFound
from fleet.models import Workflow
from fleet.services.budget import budget_allowed, pool_budget, pool_budgets
from fleet.services.workflows import workflow_finish, workflow_start
from tests.fleet.conftest import make_nodes, make_pool


@pytest.mark.parametrize(
    ("budget", "nodes", "allowed"),
    [
        ("0", 100, 0),
        ("0", 0, 0),
        ("0.05", 0, 0),
        ("0.05", 1, 1),  # tiny pools: ceil gives 1
        ("0.05", 3, 1),
        ("0.05", 20, 1),
        ("0.05", 21, 2),
        ("0.07", 100, 7),  # no float error (0.07 * 100 == 7.000000000000001 in floats)
        ("0.1", 30, 3),
        ("0.29", 100, 29),
        ("0.57", 100, 57),
        ("0.00001", 1_000_000, 10),
        ("0.00001", 1, 1),
        ("1", 7, 7),
        ("0.33333", 3, 1),
        ("0.05", 10_000, 500),
        ("0.05", 10_001, 501),
    ],
)
def test_budget_allowed_is_an_exact_ceiling(budget, nodes, allowed):
    assert budget_allowed(budget=Decimal(budget), nodes=nodes) == allowed


def test_budget_allowed_takes_a_float_by_its_shortest_repr():
    assert budget_allowed(budget=0.07, nodes=100) == 7


@pytest.mark.django_db
def test_pool_budget_counts_workflows_and_sources_once_per_node(tenant, disruption_source):
    pool = make_pool(tenant, budget="0.1")
    other = make_pool(tenant, name="other", budget="0.1")
    nodes = make_nodes(pool, 40)
    other_nodes = make_nodes(other, 20)

    assert pool_budget(pool_id=pool.id) == pool_budget(pool_id=pool.id)  # frozen, comparable
    budget = pool_budget(pool_id=pool.id)
    assert (budget.nodes, budget.allowed, budget.disrupted, budget.available) == (40, 4, 0, 4)

    workflow_start(tenant=tenant, node_id=nodes[0].id, kind="remediation")
    workflow_start(tenant=tenant, node_id=nodes[0].id, kind="maintenance")  # same node: still one
    disruption_source.nodes |= {nodes[0].id, nodes[1].id, other_nodes[0].id}
    workflow_start(tenant=tenant, node_id=other_nodes[1].id, kind="remediation")

    budget = pool_budget(pool_id=pool.id)
    assert (budget.disrupted, budget.available) == (2, 2)
    assert pool_budget(pool_id=other.id).disrupted == 2


@pytest.mark.django_db
def test_finished_workflows_do_not_count(tenant):
    pool = make_pool(tenant, budget="0.5")
    nodes = make_nodes(pool, 2)
    workflow = workflow_start(tenant=tenant, node_id=nodes[0].id, kind="remediation")
    assert pool_budget(pool_id=pool.id).disrupted == 1
    workflow_finish(tenant=tenant, workflow_id=workflow.id)
    assert pool_budget(pool_id=pool.id).disrupted == 0


@pytest.mark.django_db
def test_budget_zero_allows_nothing_and_available_never_goes_negative(tenant, disruption_source):
    pool = make_pool(tenant, budget="0")
    nodes = make_nodes(pool, 5)
    disruption_source.nodes |= {node.id for node in nodes[:3]}
    budget = pool_budget(pool_id=pool.id)
    assert (budget.allowed, budget.disrupted, budget.available) == (0, 3, 0)


@pytest.mark.django_db
def test_empty_and_unknown_pools(tenant):
    pool = make_pool(tenant)
    assert pool_budget(pool_id=pool.id).nodes == 0
    assert pool_budget(pool_id=pool.id).available == 0
    import uuid

    unknown = uuid.uuid4()
    with pytest.raises(NotFound):
        pool_budget(pool_id=unknown)
    assert set(pool_budgets(pool_ids=[pool.id, unknown])) == {pool.id}
    assert pool_budgets(pool_ids=[]) == {}


@pytest.mark.django_db
def test_pool_budget_is_two_queries_whatever_the_pool_size(tenant, disruption_source):
    small, large = make_pool(tenant, name="small"), make_pool(tenant, name="large")
    make_nodes(small, 3)
    large_nodes = make_nodes(large, 2000)
    disruption_source.nodes |= {node.id for node in large_nodes[:50]}
    for pool_id in (small.id, large.id):
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            pool_budget(pool_id=pool_id, lock=True)
        assert len(queries) == 2
        assert "FOR NO KEY UPDATE" in queries[0]["sql"]
    assert pool_budget(pool_id=large.id).disrupted == 50


@pytest.mark.django_db
def test_pool_budgets_is_constant_queries_for_any_number_of_pools(tenant, disruption_source):
    pools = [make_pool(tenant, name=f"p{i}", budget="0.25") for i in range(12)]
    for pool in pools:
        nodes = make_nodes(pool, 8)
        Workflow.objects.create(
            tenant=tenant, node=nodes[0], pool=pool, kind="remediation", started_at="2026-01-01T00:00:00Z"
        )
        disruption_source.nodes |= {nodes[0].id, nodes[1].id}
    with CaptureQueriesContext(connection) as one:
        pool_budgets(pool_ids=[pools[0].id])
    with CaptureQueriesContext(connection) as many:
        budgets = pool_budgets(pool_ids=[pool.id for pool in pools])
    assert len(one) == len(many) == 2
    assert all((b.nodes, b.allowed, b.disrupted, b.available) == (8, 2, 2, 0) for b in budgets.values())
    assert budgets[pools[3].id] == pool_budget(pool_id=pools[3].id)
