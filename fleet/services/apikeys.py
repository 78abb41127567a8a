"""API keys' life: made by their owner no wider than the key that makes them, used, expired, revoked.

docs/api.md#api-keys. A key made through the API (``api_key_issue``) has scopes no wider than the
calling key's and an expiry no later than it (a calling key that expires cannot make one that does
not), within ``API_KEY_MAX_LIFETIME`` of now; without ``expiresAt`` it lives as long as those allow.
``manage.py createapikey`` is the operator's own and is bounded by none of these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet

from core.errors import DomainError, InvalidInput, NotFound
from fleet.models import ApiKey
from fleet.services.audit import Actor, audit_record
from fleet.services.iam import Principal, api_key_create, principal_for_key, scopes_checked

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

#: ``lastUsedAt`` is written when it is at least this old: at most one write per key per minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)

_LIFETIME = re.compile(r"^([1-9][0-9]{0,5})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}
#: ``API_KEY_MAX_LIFETIME`` values that lift the cap.
NO_CAP = frozenset({"none", "0"})


def lifetime_parse(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m`` as a duration; anything else: ValueError saying what is expected."""
    found = _LIFETIME.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a lifetime such as 30d, 12h or 90m (a whole number of days, hours, minutes)")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def max_lifetime() -> timedelta | None:
    """``API_KEY_MAX_LIFETIME`` (default none: no cap; ``none`` or ``0`` say so). A bad value is fleet.E010."""
    text = str(getattr(settings, "API_KEY_MAX_LIFETIME", "none")).strip().lower()
    return None if text in NO_CAP else lifetime_parse(text)


class KeyExpired(DomainError):
    """The key's ``expiresAt`` has passed (HTTP 401 ``key_expired``)."""

    status = 401
    code = "key_expired"


def api_key_authenticate(*, plain_key: str, now: datetime) -> Principal | None:
    """The key's principal (None: unknown or revoked); an expired key raises KeyExpired.

    One query, the key lookup, plus a write at most once a minute per key for ``lastUsedAt``.
    """
    principal = principal_for_key(plain_key)
    if principal is None:
        return None
    if principal.expired(now=now):
        raise KeyExpired("This API key has expired; make a new one.")
    api_key_touch(api_key=principal.api_key, now=now)
    return principal


def api_key_touch(*, api_key: ApiKey, now: datetime) -> None:
    """Record the key's use when its ``last_used_at`` is a minute old or more (read with the key: no query else).

    ``API_KEY_LAST_USED=false`` turns it off (the test suite does, but where it is the subject).
    """
    if not settings.API_KEY_LAST_USED:
        return
    if api_key.last_used_at is not None and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
    # Conditional: of concurrent requests, one writes.
    ApiKey.objects.filter(stale, pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


@dataclass(frozen=True)
class KeyRequest:
    """What a caller asks for: a name, scopes, an expiry (None: none)."""

    name: str
    scopes: list[str]
    expires_at: datetime | None
    #: False: the caller left ``expiresAt`` out, and the key lives as long as the bounds allow (``_expiry_default``).
    expiry_given: bool = True


def _expiry_default(*, caller: ApiKey, now: datetime) -> datetime | None:
    """The latest expiry a key made now may have: the calling key's, within the cap (None: neither bounds it)."""
    cap = max_lifetime()
    bounds = [when for when in (caller.expires_at, None if cap is None else now + cap) if when is not None]
    return min(bounds, default=None)


def _expiry_checked(*, caller: ApiKey, expires_at: datetime | None, now: datetime) -> None:
    def refuse(detail: str, code: str) -> InvalidInput:
        return InvalidInput(f"expiresAt: {detail}", code=code, field="expiresAt")

    if expires_at is not None and expires_at <= now:
        raise refuse("the expiry is in the past.", "expiry_in_past")
    if caller.expires_at is not None and (expires_at is None or expires_at > caller.expires_at):
        raise refuse(
            f"the calling key expires at {caller.expires_at.isoformat()}; a key it makes must expire no later.",
            "expiry_too_late",
        )
    cap = max_lifetime()
    if cap is not None and (expires_at is None or expires_at > now + cap):
        raise refuse(
            f"keys expire within API_KEY_MAX_LIFETIME ({settings.API_KEY_MAX_LIFETIME}) of now: "
            f"no later than {(now + cap).isoformat()}.",
            "expiry_too_late",
        )


def api_key_issue(*, principal: Principal, request: KeyRequest, now: datetime) -> tuple[ApiKey, str]:
    """A key for the caller's own user, no wider and no longer-lived than the calling key; 400 else, nothing made."""
    scopes = scopes_checked(request.scopes)
    wider = sorted(set(scopes) - principal.scopes)
    if wider:
        raise InvalidInput(
            f"scopes: the calling key does not have {', '.join(wider)}; a key it makes has no wider scopes.",
            code="scope_too_wide",
            field="scopes",
        )
    expires_at = request.expires_at
    if not request.expiry_given:
        expires_at = _expiry_default(caller=principal.api_key, now=now)
    _expiry_checked(caller=principal.api_key, expires_at=expires_at, now=now)
    return api_key_create(
        tenant=principal.tenant,
        username=principal.user.get_username(),
        scopes=scopes,
        expires_at=expires_at,
        name=request.name,
        actor=Actor.api(principal.user, principal.api_key),
    )


def api_keys_of(*, user: _User) -> QuerySet[ApiKey]:
    """The user's keys (revoked ones too), newest first."""
    return ApiKey.objects.filter(user=user).order_by("-created_at", "-id")


def api_keys_revoke(*, keys: QuerySet[ApiKey], actor: Actor, now: datetime) -> int:
    """Revoke the keys of ``keys`` not yet revoked, each audited ``apikey.revoke``; how many were."""
    revoked = 0
    with transaction.atomic():
        for api_key in keys.select_for_update(of=("self",)).filter(revoked_at__isnull=True).select_related("tenant"):
            ApiKey.objects.filter(pk=api_key.pk).update(revoked_at=now)
            audit_record(
                tenant=api_key.tenant,
                actor=actor,
                action="apikey.revoke",
                object_type="apikey",
                object_id=api_key.pk,
                before={"revokedAt": None},
                after={"revokedAt": now},
            )
            revoked += 1
    return revoked


def api_key_revoke(*, user: _User, api_key_id: str, actor: Actor, now: datetime) -> None:
    """Revoke one of ``user``'s keys (again: nothing changes); another user's or none: 404."""
    is_id = re.fullmatch(r"[0-9]{1,18}", api_key_id) is not None
    keys = api_keys_of(user=user).filter(pk=int(api_key_id)) if is_id else ApiKey.objects.none()
    if not keys.exists():
        raise NotFound("No such API key.")
    api_keys_revoke(keys=keys, actor=actor, now=now)
