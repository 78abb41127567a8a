"""Budget and one-start-per-node under concurrent ticks and workflows (PostgreSQL)."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, connections, transaction

from core.errors import DomainError
from fleet.models import Command, NodeSession, Workflow
from fleet.services.budget import pool_budget
from fleet.services.workflows import workflow_start
from rollout.controller.settle import node_upgrade_settle_reported
from rollout.controller.statements import ASK_TICK_SQL, SUCCEED_REJOINED_SQL
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade, Rollout, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.concurrency import run_together
from tests.factories import fleet

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def locked_elsewhere(model, pk) -> Iterator[None]:
    """The row locked by another connection's transaction (another worker's) while the block runs."""
    held, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                model.objects.select_for_update().get(pk=pk)
                held.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(timeout=30)
    try:
        yield
    finally:
        release.set()
        holder.join(timeout=30)


def test_concurrent_ticks_and_workflows_never_exceed_the_budget_or_start_a_node_twice(tenant, releases):
    # Old agents get one daemon.upgrade command per start: a double start would show as two.
    nodes = fleet(tenant, {"a": (200, "0.05")}, protocol=1)["a"]  # allowed 10
    pool_id = nodes[0].pool_id
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    order = list(NodeUpgrade.objects.filter(rollout=rollout).order_by("-position").values_list("node_id", flat=True))
    workflow_nodes = iter(order[:40])
    refused: list[str] = []
    lock = threading.Lock()

    def tick():
        rollout_tick(rollout_id=rollout.id)

    def start_workflow():
        with lock:
            node_id = next(workflow_nodes)
        try:
            workflow_start(tenant=tenant, node_id=node_id, kind="remediation")
        except DomainError as exc:
            refused.append(exc.code)

    errors = run_together(tick, tick, tick, start_workflow, start_workflow, rounds=5)
    assert errors == []
    in_flight = NodeUpgrade.objects.filter(rollout=rollout, state="in_flight").count()
    workflows = Workflow.objects.filter(state="active").count()
    assert in_flight + workflows <= 10
    assert pool_budget(pool_id=pool_id).disrupted == in_flight + workflows
    assert in_flight >= 1  # the ticks did start nodes
    assert set(refused) <= {"budget_exhausted"}
    started = NodeUpgrade.objects.filter(rollout=rollout, started_at__isnull=False).count()
    per_node = Command.objects.values_list("node_id", flat=True)
    assert len(per_node) == len(set(per_node)) == started


def test_two_creates_over_the_same_nodes_at_once_one_wins_the_other_gets_409(tenant, releases):
    fleet(tenant, {"a": (300, "0.1"), "b": (300, "0.1")})
    outcomes: list[str] = []

    def create():
        try:
            rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
            outcomes.append("created")
        except DomainError as exc:
            outcomes.append(f"{exc.status}:{exc.code}")

    for _ in range(3):
        outcomes.clear()
        errors = run_together(create, create)
        assert errors == []
        assert sorted(outcomes) == ["409:conflict", "created"]  # never a deadlock's 500
        Rollout.objects.filter(state="active").update(state="aborted")
        NodeUpgrade.objects.update(claims_node=False)
    assert Rollout.objects.count() == 3


def test_a_join_never_waits_for_a_tick_that_holds_its_node_and_a_later_tick_settles_it(tenant, releases):
    """A tick holds the in-flight rows it settles locked until it commits (seconds, when a round starts hundreds
    of nodes): the join of a node whose row it holds answers at once, and asks for another tick, which settles
    the node when the holder did not (docs/controller.md#reacting-at-once)."""
    (node,) = fleet(tenant, {"a": (1, "1")})["a"]
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    assert rollout_tick(rollout_id=rollout.id).started == 1
    upgrade = NodeUpgrade.objects.get(rollout=rollout, node=node)
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    with locked_elsewhere(NodeUpgrade, upgrade.pk):  # as a tick's transaction that settles nothing
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # waiting for the holder fails the join, not the test run
        try:
            started = time.monotonic()
            run: list[str] = []
            with connection.execute_wrapper(lambda execute, sql, *args: run.append(sql) or execute(sql, *args)):
                assert node_upgrade_settle_reported(node_id=node.id, daemon_version="1.0.0") is False
            assert time.monotonic() - started < 2
            # The settle's one statement found the row held and named its rollout; then the ask: nothing else.
            assert run == [SUCCEED_REJOINED_SQL, ASK_TICK_SQL]
            assert TickRequest.objects.get(rollout=rollout).queued  # the tick that will settle it
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    upgrade.refresh_from_db()
    assert upgrade.state == "in_flight"
    NodeSession.objects.filter(node=node).update(daemon_version="1.0.0")  # the join was committed
    rollout_tick(rollout_id=rollout.id)
    upgrade.refresh_from_db()
    assert upgrade.state == "succeeded"


def test_a_join_settles_before_it_asks_for_a_tick(tenant, releases):
    """The join's tick is asked for after its settle has committed (docs/controller.md#reacting-at-once): while
    another transaction holds the rollout's tick request (a tick claiming it, another join asking), the node has
    already succeeded for every other connection to see, and only the ask waits; then it raises the request."""
    (node,) = fleet(tenant, {"a": (1, "1")})["a"]
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    assert rollout_tick(rollout_id=rollout.id).started == 1
    upgrade = NodeUpgrade.objects.get(rollout=rollout, node=node)
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    settled: list[bool] = []

    def join() -> None:
        try:
            settled.append(node_upgrade_settle_reported(node_id=node.id, daemon_version="1.0.0"))
        finally:
            connections.close_all()

    with locked_elsewhere(TickRequest, rollout.id):
        joiner = threading.Thread(target=join)
        joiner.start()
        deadline = time.monotonic() + 10
        while NodeUpgrade.objects.get(pk=upgrade.pk).state != "succeeded":
            assert time.monotonic() < deadline, "the settle waited for the tick request's row"
            time.sleep(0.01)
        assert joiner.is_alive()  # asking waits for the row
        assert not TickRequest.objects.get(rollout=rollout).queued
    joiner.join(timeout=30)
    assert settled == [True]
    assert TickRequest.objects.get(rollout=rollout).queued
