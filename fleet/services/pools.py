"""Pools: groups of nodes sharing a disruption budget and a default daemon version."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction

from core.errors import Conflict, InvalidInput
from fleet.models import Pool, Tenant
from fleet.models.fleet import DEFAULT_DISRUPTION_BUDGET
from fleet.services.audit import Actor, audit_record

POOL_NAME_MAX = 100


def _budget(value: Decimal | float | int | str) -> Decimal:
    try:
        budget = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError) as exc:
        raise InvalidInput("disruptionBudget must be a number in [0, 1].", code="invalid_budget") from exc
    if not budget.is_finite() or not Decimal(0) <= budget <= Decimal(1):
        raise InvalidInput("disruptionBudget must be a number in [0, 1].", code="invalid_budget")
    if budget != budget.quantize(Decimal("0.00001")):
        raise InvalidInput("disruptionBudget has at most 5 decimal places.", code="invalid_budget")
    return budget


def pool_create(
    *,
    tenant: Tenant,
    name: str,
    disruption_budget: Decimal | float | str = DEFAULT_DISRUPTION_BUDGET,
    actor: Actor | None = None,
) -> Pool:
    """A new pool of ``tenant``; 409 ``pool_exists`` when the tenant has one of that name."""
    if not isinstance(name, str) or not name.strip() or len(name) > POOL_NAME_MAX:
        raise InvalidInput(f"name must be 1 to {POOL_NAME_MAX} characters.", code="invalid_name")
    budget = _budget(disruption_budget)
    try:
        with transaction.atomic():
            pool = Pool.objects.create(tenant=tenant, name=name, disruption_budget=budget)
            audit_record(
                tenant=tenant,
                actor=actor,
                action="pool.create",
                object_type="pool",
                object_id=pool.pk,
                after=pool_audit_fields(pool),
            )
            return pool
    except IntegrityError as exc:
        # The unique constraint decides (two creates at once cannot both pass a pre-check).
        if Pool.objects.filter(tenant=tenant, name=name).exists():
            raise Conflict(f"Pool {name!r} already exists.", code="pool_exists") from exc
        raise


def pool_audit_fields(pool: Pool) -> dict[str, Any]:
    """A pool's fields as the API shows them, for audit ``before``/``after`` (pool.create, pool.update)."""
    return {
        "name": pool.name,
        "policy": {"disruptionBudget": float(pool.disruption_budget)},
        "defaultDaemonVersion": pool.default_daemon_version,
    }


def pools_set_default_daemon_version(*, pool_ids: Sequence[UUID], version: str | None) -> int:
    """Nodes that join these pools later get ``version`` as their desired daemon. One UPDATE."""
    return Pool.objects.filter(pk__in=list(pool_ids)).update(default_daemon_version=version)


def tenant_slugs() -> list[str]:
    """Every tenant's slug, in order (labels of the per-tenant metrics)."""
    return list(Tenant.objects.order_by("slug").values_list("slug", flat=True))
