"""Pools: groups of nodes sharing a disruption budget and a default daemon version."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction

from core.errors import Conflict, InvalidInput, NotFound
from fleet.models import Pool, Tenant
from fleet.models.fleet import DEFAULT_DISRUPTION_BUDGET
from fleet.services.audit import Actor, audit_record, changed_fields
from fleet.windows import MaintenanceWindow, WindowError, next_opening, opening_window, parse_windows

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


def windows_validate(value: object, field: str = "policy.maintenanceWindows") -> list[dict[str, Any]]:
    """The one validation of maintenance windows (API and admin): their stored (API) form.

    400 ``invalid_window`` with a sentence naming the offending field (docs/api.md#pools).
    """
    try:
        windows = parse_windows(value, field)
    except WindowError as exc:
        raise InvalidInput(str(exc), code=exc.code, field=exc.field) from exc
    return [window.as_json() for window in windows]


def pool_create(
    *,
    tenant: Tenant,
    name: str,
    disruption_budget: Decimal | float | str = DEFAULT_DISRUPTION_BUDGET,
    maintenance_windows: object = None,
    actor: Actor | None = None,
) -> Pool:
    """A new pool of ``tenant``; 409 ``pool_exists`` when the tenant has one of that name."""
    if not isinstance(name, str) or not name.strip() or len(name) > POOL_NAME_MAX:
        raise InvalidInput(f"name must be 1 to {POOL_NAME_MAX} characters.", code="invalid_name")
    budget = _budget(disruption_budget)
    windows = windows_validate(maintenance_windows)
    try:
        with transaction.atomic():
            pool = Pool.objects.create(tenant=tenant, name=name, disruption_budget=budget, maintenance_windows=windows)
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


#: ``policy`` keys a PATCH may give, and the Pool field each replaces.
POLICY_FIELDS = {"disruptionBudget": "disruption_budget", "maintenanceWindows": "maintenance_windows"}


def pool_update(*, tenant: Tenant, pool_id: UUID, policy: Mapping[str, Any], actor: Actor | None = None) -> Pool:
    """Replace the given ``policy`` fields of a pool (``PATCH``, docs/api.md#pools), audited as ``pool.update``.

    Every value is checked before anything is written: a refusal changes nothing.
    """
    unknown = sorted(set(policy) - set(POLICY_FIELDS))
    if unknown:
        field = f"policy.{unknown[0]}"
        raise InvalidInput(f"{field} is not a policy field.", code="invalid_input", field=field)
    changes: dict[str, Any] = {}
    if "disruptionBudget" in policy:
        changes["disruption_budget"] = _budget(policy["disruptionBudget"])
    if "maintenanceWindows" in policy:
        changes["maintenance_windows"] = windows_validate(policy["maintenanceWindows"])
    with transaction.atomic():
        pool = Pool.objects.select_for_update().filter(tenant=tenant, pk=pool_id).first()
        if pool is None:
            raise NotFound(f"No pool {pool_id}.", code="not_found")
        before = pool_audit_fields(pool)
        for name, value in changes.items():
            setattr(pool, name, value)
        if changes:
            pool.save(update_fields=list(changes))
        old, new = pool_changed_fields(before, pool_audit_fields(pool))
        if new:
            audit_record(
                tenant=tenant,
                actor=actor,
                action="pool.update",
                object_type="pool",
                object_id=pool.pk,
                before=old,
                after=new,
            )
    return pool


def pool_policy(pool: Pool) -> dict[str, Any]:
    """A pool's ``policy`` as the API shows it."""
    return {
        "disruptionBudget": float(pool.disruption_budget),
        "maintenanceWindows": list(pool.maintenance_windows or []),
    }


def pool_audit_fields(pool: Pool) -> dict[str, Any]:
    """A pool's fields as the API shows them, for audit ``before``/``after`` (pool.create, pool.update)."""
    return {
        "name": pool.name,
        "policy": pool_policy(pool),
        "defaultDaemonVersion": pool.default_daemon_version,
    }


def pool_changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``changed_fields`` of two ``pool_audit_fields``, with ``policy`` narrowed to the policy fields that changed."""
    old, new = changed_fields(before, after)
    if "policy" in new:
        old["policy"], new["policy"] = changed_fields(before["policy"], after["policy"])
    return old, new


def windows_of(pool: Pool) -> tuple[MaintenanceWindow, ...]:
    """A pool's windows, parsed (stored ones were validated on the way in)."""
    return parse_windows(pool.maintenance_windows or None)


def pool_windows(*, pool_ids: Iterable[UUID]) -> dict[UUID, tuple[MaintenanceWindow, ...]]:
    """Each pool's maintenance windows (``()``: always open). One query."""
    rows = Pool.objects.filter(pk__in=list(pool_ids)).values_list("id", "maintenance_windows")
    return {pool_id: parse_windows(windows or None) for pool_id, windows in rows}


@dataclass(frozen=True)
class PoolWindows:
    """A pool's maintenance windows seen at one instant: open then, or when they open next (docs/fleet.md)."""

    windows: tuple[MaintenanceWindow, ...]
    at: datetime
    #: ``at`` while open, else the next opening.
    opens_at: datetime

    @property
    def open(self) -> bool:
        return self.opens_at <= self.at

    @property
    def opening(self) -> MaintenanceWindow | None:
        """The window that opens next (None while open)."""
        return None if self.open else opening_window(self.windows, self.opens_at)


def windows_at(windows: tuple[MaintenanceWindow, ...], now: datetime) -> PoolWindows:
    """``windows`` seen at ``now``: the one reading of "may this pool's nodes start now"."""
    return PoolWindows(windows=windows, at=now, opens_at=next_opening(windows, now))


def pool_windows_at(*, pool_ids: Iterable[UUID], now: datetime) -> dict[UUID, PoolWindows]:
    """Each pool's windows at ``now`` (``windows_at``): one query."""
    return {pool_id: windows_at(windows, now) for pool_id, windows in pool_windows(pool_ids=pool_ids).items()}


def pool_windows_open(*, pool_ids: Iterable[UUID], now: datetime) -> set[UUID]:
    """The pools among ``pool_ids`` whose maintenance windows are open at ``now`` (no windows: open)."""
    return {pool_id for pool_id, windows in pool_windows_at(pool_ids=pool_ids, now=now).items() if windows.open}


def pools_set_default_daemon_version(*, pool_ids: Sequence[UUID], version: str | None) -> int:
    """Nodes that join these pools later get ``version`` as their desired daemon. One UPDATE."""
    return Pool.objects.filter(pk__in=list(pool_ids)).update(default_daemon_version=version)


def tenant_slugs() -> list[str]:
    """Every tenant's slug, in order (labels of the per-tenant metrics)."""
    return list(Tenant.objects.order_by("slug").values_list("slug", flat=True))
