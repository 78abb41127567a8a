"""Workflows (remediation, maintenance): they disrupt their node while active.

Transitions: active -> finished (``workflow_finish``, a conditional update).
"""

from __future__ import annotations

from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, InvalidState, NotFound
from fleet.models import Node, Tenant, Workflow
from fleet.services.audit import Actor, audit_record
from fleet.services.budget import disrupted_node_q, pool_budget

log = structlog.get_logger(__name__)


def workflow_start(*, tenant: Tenant, node_id: UUID, kind: str, actor: Actor | None = None) -> Workflow:
    """Start a workflow on a node of ``tenant`` within its pool's disruption budget.

    Under the pool lock (``pool_budget(lock=True)``): a node that is not yet
    disrupted needs one available slot, else 409 ``budget_exhausted``; a node
    already disrupted (another workflow, an upgrade in flight) takes no more.
    A second active workflow of the same kind on a node is 409 ``workflow_active``
    (decided by the partial unique constraint).
    """
    if kind not in Workflow.Kind.values:
        raise InvalidInput(f"Unknown workflow kind {kind!r}.", code="invalid_kind")
    with transaction.atomic():
        node = Node.objects.filter(tenant=tenant, pk=node_id).values("id", "pool_id").first()
        if node is None:
            raise InvalidInput(f"No node {node_id} in this tenant.", code="unknown_node")
        budget = pool_budget(pool_id=node["pool_id"], lock=True)
        if (
            budget.available < 1
            and not Node.objects.filter(pk=node["id"]).filter(disrupted_node_q(pool_ids=[node["pool_id"]])).exists()
        ):
            raise Conflict(
                f"The pool's disruption budget is exhausted ({budget.disrupted}/{budget.allowed} nodes disrupted).",
                code="budget_exhausted",
                disrupted=budget.disrupted,
                allowed=budget.allowed,
            )
        try:
            with transaction.atomic():
                workflow = Workflow.objects.create(
                    tenant=tenant,
                    node_id=node["id"],
                    pool_id=node["pool_id"],
                    kind=kind,
                    started_at=timezone.now(),
                )
        except IntegrityError as exc:
            # The partial unique constraint decides; a pre-check alone would race.
            if Workflow.objects.filter(node_id=node["id"], kind=kind, state=Workflow.State.ACTIVE).exists():
                raise Conflict(f"The node already has an active {kind} workflow.", code="workflow_active") from exc
            raise
        audit_record(
            tenant=tenant,
            actor=actor,
            action="workflow.start",
            object_type="workflow",
            object_id=workflow.pk,
            after={"nodeId": str(workflow.node_id), "kind": kind, "state": workflow.state},
        )
    log.info("fleet.workflow.started", workflow_id=str(workflow.id), node_id=str(workflow.node_id), kind=kind)
    return workflow


def workflow_finish(*, tenant: Tenant, workflow_id: UUID, actor: Actor | None = None) -> Workflow:
    """End an active workflow: its node stops counting as disrupted. 409 ``invalid_state`` when already finished."""
    with transaction.atomic():
        updated = Workflow.objects.filter(tenant=tenant, pk=workflow_id, state=Workflow.State.ACTIVE).update(
            state=Workflow.State.FINISHED, finished_at=timezone.now()
        )
        workflow = Workflow.objects.filter(tenant=tenant, pk=workflow_id).first()
        if workflow is None:
            raise NotFound(f"No workflow {workflow_id}.", code="not_found")
        if not updated:
            raise InvalidState("The workflow is already finished.", code="invalid_state")
        audit_record(
            tenant=tenant,
            actor=actor,
            action="workflow.finish",
            object_type="workflow",
            object_id=workflow.pk,
            before={"state": Workflow.State.ACTIVE},
            after={"state": workflow.state},
        )
    log.info("fleet.workflow.finished", workflow_id=str(workflow.id), node_id=str(workflow.node_id))
    return workflow
