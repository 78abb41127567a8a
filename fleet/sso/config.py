"""The SSO settings, and ``OIDC_ROLE_MAP`` parsed into (group, tenant, permission) rules."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings

from fleet.models import Permission

#: How far the provider's clock may be from ours when checking ``exp``, ``iat`` and ``nbf`` (seconds).
CLOCK_SKEW_SECONDS = 60
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


@dataclass(frozen=True)
class RoleRule:
    """Members of ``group`` at the provider hold ``permission`` on ``tenant``'s fleet scope."""

    group: str
    tenant: str
    permission: str


def parse_role_map(text: str) -> tuple[RoleRule, ...]:
    """``group=tenant:permission,…`` (e.g. ``sre=acme:compute:fleet:admin``); ValueError naming the entry."""
    rules: list[RoleRule] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        group, equals, target = (s.strip() for s in entry.rpartition("="))
        tenant, colon, permission = (s.strip() for s in target.partition(":"))
        if not (equals and group and colon and tenant):
            raise ValueError(f"{entry!r} is not group=tenant:permission")
        if not _SLUG.match(tenant):
            raise ValueError(f"{entry!r}: {tenant!r} is not a tenant slug")
        if permission not in Permission.values:
            raise ValueError(f"{entry!r}: unknown permission {permission!r} (one of {', '.join(Permission.values)})")
        rules.append(RoleRule(group=group, tenant=tenant, permission=permission))
    return tuple(rules)


def sso_variables() -> dict[str, str]:
    """The three variables that turn SSO on, as set (empty when unset)."""
    return {
        name: str(getattr(settings, name, "") or "")
        for name in ("OIDC_ISSUER_URL", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET")
    }


def sso_enabled() -> bool:
    """All three of ``OIDC_ISSUER_URL``, ``OIDC_CLIENT_ID`` and ``OIDC_CLIENT_SECRET`` set (sso.E001 otherwise)."""
    return all(sso_variables().values())


def issuer() -> str:
    """The issuer as the ID token's ``iss`` names it: ``OIDC_ISSUER_URL`` without a trailing slash."""
    return str(settings.OIDC_ISSUER_URL).rstrip("/")


def role_rules() -> tuple[RoleRule, ...]:
    """The parsed role map; a map that does not parse grants nothing (sso.E002 stops the servers first)."""
    try:
        return parse_role_map(str(getattr(settings, "OIDC_ROLE_MAP", "") or ""))
    except ValueError:
        return ()


def session_max_age() -> int:
    value = getattr(settings, "OIDC_SESSION_MAX_AGE", 8 * 3600)
    return value if type(value) is int and value > 0 else 8 * 3600
