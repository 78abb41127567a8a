"""System checks of the single sign-on settings (docs/operations.md#single-sign-on).

| id | problem |
| --- | --- |
| sso.E001 | some but not all of OIDC_ISSUER_URL, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET are set |
| sso.E002 | an OIDC_ROLE_MAP entry is not ``group=tenant:permission`` with a known permission |
| sso.E003 | OIDC_SESSION_MAX_AGE is not an integer >= 60 (seconds) |
| sso.E004 | ADMIN_PASSWORD_LOGIN=0 without single sign-on: nobody could sign in to the console |
| sso.E005 | OIDC_ISSUER_URL is not an https:// URL (http:// only on loopback, for local tests) |
| sso.W001 | OIDC_ROLE_MAP names a tenant that does not exist (its groups give nothing; ``--database``/migrate) |
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError

from fleet.sso.config import parse_role_map, sso_enabled, sso_variables

TAG = "sso"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@register(TAG)
def check_sso_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    variables = sso_variables()
    if any(variables.values()) and not all(variables.values()):
        missing = ", ".join(name for name, value in variables.items() if not value)
        messages.append(
            Error(
                f"Single sign-on is half configured: {missing} not set.",
                hint="Set OIDC_ISSUER_URL, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET together (or none of them).",
                id="sso.E001",
            )
        )
    try:
        parse_role_map(str(getattr(settings, "OIDC_ROLE_MAP", "") or ""))
    except ValueError as exc:
        messages.append(
            Error(
                f"OIDC_ROLE_MAP: {exc}.",
                hint="Entries are group=tenant:permission, comma-separated, e.g. "
                "sre=acme:compute:fleet:admin,sre-leads=acme:compute:rollout:approve.",
                id="sso.E002",
            )
        )
    max_age = getattr(settings, "OIDC_SESSION_MAX_AGE", 8 * 3600)
    if type(max_age) is not int or max_age < 60:
        messages.append(
            Error(
                f"OIDC_SESSION_MAX_AGE {max_age!r} is not an integer of at least 60 (seconds).",
                hint="How long a console session signed in through the provider lasts at most (default 28800: 8 h).",
                id="sso.E003",
            )
        )
    if not getattr(settings, "ADMIN_PASSWORD_LOGIN", True) and not sso_enabled():
        messages.append(
            Error(
                "ADMIN_PASSWORD_LOGIN=0 turns local passwords off, but single sign-on is not configured: "
                "nobody could sign in to the console.",
                hint="Set OIDC_ISSUER_URL, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET, or keep ADMIN_PASSWORD_LOGIN=1.",
                id="sso.E004",
            )
        )
    issuer = variables["OIDC_ISSUER_URL"]
    parts = urlsplit(issuer)
    if issuer and not (parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)):
        messages.append(
            Error(
                f"OIDC_ISSUER_URL {issuer!r} is not an https:// URL.",
                hint="The issuer as the provider names it, e.g. https://sso.example.com/realms/ops "
                "(http:// only on loopback, for a local test provider).",
                id="sso.E005",
            )
        )
    return messages


@register(TAG, "database")
def check_role_map_tenants(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The role map's tenants exist (a database check: ``migrate`` and ``check --database default`` run it)."""
    if not databases:
        return []
    from fleet.models import Tenant

    try:
        rules = parse_role_map(str(getattr(settings, "OIDC_ROLE_MAP", "") or ""))
    except ValueError:
        return []  # sso.E002
    if not rules:
        return []
    try:
        known = set(Tenant.objects.filter(slug__in={rule.tenant for rule in rules}).values_list("slug", flat=True))
    except DatabaseError:
        return []  # no database yet, or not migrated
    return [
        Warning(
            f"OIDC_ROLE_MAP: the tenant {slug!r} does not exist; the groups mapped to it give no access.",
            hint="Create the tenant (manage.py createtenant) or correct the map.",
            id="sso.W001",
        )
        for slug in sorted({rule.tenant for rule in rules} - known)
    ]
