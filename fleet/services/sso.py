"""Console users signed in through the identity provider: their tenant and grants follow their groups.

Called at every sign-in (fleet/sso/backend.py) with the provider's verified claims: the groups
claim, through ``OIDC_ROLE_MAP``, decides the user's one tenant and their grants on its fleet
scope; whatever the map no longer gives is taken away. A user whose groups give nothing keeps
no grant and no console access (``is_staff`` off) and is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Permission as ModelPermission
from django.db import transaction
from django.db.models import Q

from fleet.models import Grant, Membership, Permission, Tenant
from fleet.services.audit import Actor, audit_record
from fleet.services.iam import FLEET_SCOPE

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

    from fleet.sso.config import RoleRule

#: Apps whose rows the console shows; an SSO user may view them all. The tenant's IAM rows
#: (tenants, memberships, grants) come from the provider: viewed in the console, never edited there.
CONSOLE_APPS = ("fleet", "rollout")
IAM_MODELS = ("tenant", "membership", "grant")


class SignInRefused(Exception):
    """A sign-in that gives no session; ``reason`` is a short code, ``detail`` the sentence shown."""

    def __init__(self, reason: str, detail: str, username: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.username = username


@dataclass(frozen=True)
class SsoAccess:
    """What the groups give: one tenant and the permissions on its fleet scope."""

    tenant: Tenant | None
    permissions: frozenset[str]


def sso_access_for_groups(*, groups: Iterable[str], rules: Iterable[RoleRule], username: str) -> SsoAccess:
    """The access ``groups`` give through ``rules``; refused when they name tenants of more than one.

    A rule naming a tenant that does not exist gives nothing (sso.W001 warns of it).
    """
    member_of = set(groups)
    wanted = [rule for rule in rules if rule.group in member_of]
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in={r.tenant for r in wanted})}
    found = [rule for rule in wanted if rule.tenant in tenants]
    if len({rule.tenant for rule in found}) > 1:
        raise SignInRefused(
            "several_tenants",
            f"Your groups give access to several tenants ({', '.join(sorted({r.tenant for r in found}))}); "
            "a console user acts in one. Ask an administrator to fix OIDC_ROLE_MAP or your groups.",
            username,
        )
    if not found:
        return SsoAccess(tenant=None, permissions=frozenset())
    return SsoAccess(tenant=tenants[found[0].tenant], permissions=frozenset(rule.permission for rule in found))


def _model_permissions(*, fleet_admin: bool) -> list[ModelPermission]:
    """View on every console model; with compute:fleet:admin also add, change and delete, but not on IAM."""
    apps = Q(content_type__app_label__in=CONSOLE_APPS)
    view = Q(codename__startswith="view_")
    if fleet_admin:
        writes = ~Q(content_type__app_label="fleet", content_type__model__in=IAM_MODELS)
        return list(ModelPermission.objects.filter(apps & (view | writes)))
    return list(ModelPermission.objects.filter(apps & view))


@transaction.atomic
def sso_user_sync(*, username: str, email: str, groups: Iterable[str], rules: Iterable[RoleRule]) -> _User | None:
    """Create or update the console user ``username`` from their groups; None when they have no access.

    A user met for the first time with no access is not created. An existing local account of the
    same name (a usable password, or a superuser) is never taken over: refused.
    """
    groups = sorted(set(groups))
    access = sso_access_for_groups(groups=groups, rules=rules, username=username)
    users = get_user_model().objects.select_for_update()
    user = users.filter(username=username).first()
    if user is None and access.tenant is None:
        return None
    if user is None:
        # Two first sign-ins at once: one inserts, the other waits on the unique name and then reads it.
        get_user_model().objects.get_or_create(username=username, defaults={"password": make_password(None)})
        user = users.get(username=username)
    if user.has_usable_password() or user.is_superuser:
        raise SignInRefused(
            "local_account",
            f"A local account named {username!r} exists; single sign-on does not take it over. "
            "An administrator removes its password (or renames it) first.",
            username,
        )
    before = sorted(
        f"{slug}:{permission}"
        for slug, permission in Grant.objects.filter(user=user).values_list("tenant__slug", "permission")
    )
    Grant.objects.filter(user=user).exclude(
        tenant=access.tenant, scope=FLEET_SCOPE, permission__in=access.permissions
    ).delete()
    if access.tenant is not None:
        Membership.objects.update_or_create(user=user, defaults={"tenant": access.tenant})
        for permission in sorted(access.permissions):
            Grant.objects.get_or_create(tenant=access.tenant, user=user, permission=permission, scope=FLEET_SCOPE)
    else:
        Membership.objects.filter(user=user).delete()
    user.email = email
    user.is_staff = access.tenant is not None
    user.save(update_fields=["email", "is_staff"])
    user.user_permissions.set(
        _model_permissions(fleet_admin=Permission.FLEET_ADMIN in access.permissions) if user.is_staff else []
    )
    after = sorted(f"{access.tenant.slug}:{p}" for p in access.permissions) if access.tenant else []
    audit_record(
        tenant=access.tenant,
        actor=Actor.admin(username),
        action="user.sso_sign_in" if access.tenant else "user.sso_access_removed",
        object_type="user",
        object_id=user.pk,
        before={"grants": before},
        after={"grants": after, "groups": groups},
    )
    return user


def sso_refusal_record(*, refusal: SignInRefused) -> None:
    """The audit entry of a refused sign-in (the system chain: no tenant is known to be involved)."""
    audit_record(
        tenant=None,
        actor=Actor.admin(refusal.username),
        action="user.sso_refused",
        object_type="user",
        object_id=refusal.username or "-",
        after={"reason": refusal.reason, "detail": refusal.detail},
    )
