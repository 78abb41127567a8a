"""Tenants, users, API keys and grants."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Exists, OuterRef

from core.errors import Conflict, InvalidInput
from fleet.models import ApiKey, Grant, Membership, Permission, Scope, Tenant
from fleet.models.iam import MAX_ROLLOUT_APPROVALS, every_scope
from fleet.services.audit import Actor, audit_record
from fleet.tokens import new_token, token_hash

if TYPE_CHECKING:
    # django-stubs' placeholder for the AUTH_USER_MODEL (its mypy plugin resolves it).
    from django.contrib.auth.models import _User

FLEET_SCOPE = "fleet"


@dataclass(frozen=True)
class Principal:
    """Who calls the API: a user acting in one tenant through one key."""

    tenant: Tenant
    user: _User
    api_key: ApiKey
    is_fleet_admin: bool
    # compute:rollout:approve on the tenant's fleet scope: approving and denying rollouts.
    can_approve: bool = False

    @property
    def scopes(self) -> frozenset[str]:
        """What the key may call (docs/api.md#scopes): read with the key, no query of its own."""
        return frozenset(self.api_key.scopes)

    def expired(self, *, now: datetime) -> bool:
        return self.api_key.expires_at is not None and self.api_key.expires_at <= now


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant = Tenant(slug=slug, name=name)
    tenant.full_clean()
    if Tenant.objects.filter(slug=slug).exists():
        raise Conflict(f"Tenant {slug!r} already exists.", code="tenant_exists")
    tenant.save()
    return tenant


def tenant_set_rollout_approvals(*, tenant: Tenant, approvals: object, actor: Actor | None = None) -> Tenant:
    """How many approvals the tenant's new rollouts need (docs/controller.md#approvals), audited ``tenant.update``.

    Rollouts created before keep the number they were created with. Only a superuser (the admin) or
    ``manage.py settenant`` calls this: no API key reaches it.
    """
    if type(approvals) is not int or not 0 <= approvals <= MAX_ROLLOUT_APPROVALS:
        raise InvalidInput(
            f"rolloutApprovals must be an integer from 0 to {MAX_ROLLOUT_APPROVALS}, not {approvals!r}.",
            code="invalid_rollout_approvals",
        )
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = locked.rollout_approvals
        if before != approvals:
            Tenant.objects.filter(pk=tenant.pk).update(rollout_approvals=approvals)
            audit_record(
                tenant=locked,
                actor=actor,
                action="tenant.update",
                object_type="tenant",
                object_id=locked.pk,
                before={"rolloutApprovals": before},
                after={"rolloutApprovals": approvals},
            )
    tenant.rollout_approvals = approvals
    return tenant


@transaction.atomic
def user_in_tenant(*, tenant: Tenant, username: str) -> _User:
    """The user named ``username`` in ``tenant``, created when needed."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    membership, _ = Membership.objects.get_or_create(user=user, defaults={"tenant": tenant})
    if membership.tenant_id != tenant.id:
        raise InvalidInput(f"User {username!r} belongs to tenant {membership.tenant.slug!r}.", code="other_tenant")
    return user


def grant_add(*, tenant: Tenant, user: _User, permission: str, scope: str = FLEET_SCOPE) -> Grant:
    if permission not in Permission.values:
        raise InvalidInput(f"Unknown permission {permission!r}.", code="unknown_permission")
    grant, _ = Grant.objects.get_or_create(tenant=tenant, user=user, permission=permission, scope=scope)
    return grant


def scopes_checked(scopes: Iterable[object]) -> list[str]:
    """``scopes`` in their canonical order, each once; an unknown one or none at all: 400 naming ``scopes``."""
    given = list(scopes)
    unknown = [scope for scope in given if scope not in Scope.values]
    if unknown:
        raise InvalidInput(
            f"scopes: unknown scope {unknown[0]!r}; the scopes are {', '.join(Scope.values)}.",
            code="unknown_scope",
            field="scopes",
        )
    if not given:
        raise InvalidInput("scopes: give at least one scope.", code="invalid_input", field="scopes")
    return [scope for scope in Scope.values if scope in given]


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    username: str,
    grants: list[str] | tuple[str, ...] = (),
    scopes: Iterable[str] | None = None,
    expires_at: datetime | None = None,
    name: str = "",
    actor: Actor | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for ``username`` in ``tenant``; returns the row and the plain key (shown once).

    ``scopes`` None: every scope; ``expires_at`` None: the key never expires. The limits on keys made
    through the API (no wider than the caller's key, API_KEY_MAX_LIFETIME) are ``api_key_issue``'s.
    """
    checked = every_scope() if scopes is None else scopes_checked(scopes)
    user = user_in_tenant(tenant=tenant, username=username)
    for permission in grants:
        grant_add(tenant=tenant, user=user, permission=permission)
    plain = new_token("rk")
    api_key = ApiKey.objects.create(
        tenant=tenant,
        user=user,
        name=name,
        prefix=plain[:10],
        key_hash=token_hash(plain),
        scopes=checked,
        expires_at=expires_at,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        action="apikey.create",
        object_type="apikey",
        object_id=api_key.pk,
        after={
            "user": username,
            "name": name,
            "prefix": api_key.prefix,
            "grants": sorted(set(grants)),
            "scopes": checked,
            "expiresAt": expires_at,
        },
    )
    return api_key, plain


def principal_for_key(plain_key: str) -> Principal | None:
    """The principal behind a plain key, in one query; None when unknown or revoked.

    An expired key still has its principal (``Principal.expired``): the caller answers ``key_expired``.
    Its scopes and expiry ride on this query: checking them costs none.
    """

    def granted(permission: str) -> Exists:
        return Exists(
            Grant.objects.filter(
                tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id"), permission=permission, scope=FLEET_SCOPE
            )
        )

    api_key = (
        ApiKey.objects.select_related("tenant", "user")
        .annotate(is_fleet_admin=granted(Permission.FLEET_ADMIN), can_approve=granted(Permission.ROLLOUT_APPROVE))
        .filter(key_hash=token_hash(plain_key), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if api_key is None:
        return None
    return Principal(
        tenant=api_key.tenant,
        user=api_key.user,
        api_key=api_key,
        is_fleet_admin=api_key.is_fleet_admin,
        can_approve=api_key.can_approve,
    )
