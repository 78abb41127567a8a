"""The audit trail (docs/api.md#the-audit-trail): record a change, in the transaction that makes it; verify chains.

Every entry belongs to one chain: its tenant's, or the system chain (``tenant=None``) for
installation-wide changes by someone who acts in no tenant. Within a chain

    hash = sha256_hex(prevHash + "\\n" + json(entry as the API shows it, without "hash"))

with JSON keys sorted, no spaces, UTF-8; the first entry's ``prevHash`` is 64 zeros. Appends to
one chain are serialised by a transaction-scoped advisory lock, so two changes committed at once
never fork the chain; the unique (tenant, seq) constraint is the backstop.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.times import api_datetime
from fleet.models import AuditEntry, Tenant
from fleet.models.audit import GENESIS_HASH

#: pg_advisory_xact_lock(AUDIT_LOCK_CLASS, tenant id or 0): one chain's appends, one at a time.
AUDIT_LOCK_CLASS = 0x61756474  # "audt"; the two-int form cannot meet rollout's bigint keys


@dataclass(frozen=True)
class Actor:
    """Who makes a change and through what: ``via`` is "api", "admin" or "command".

    A change made through an API key names the key too (``api_key_id``, ``api_key_name``).
    """

    user: str
    via: str
    api_key_id: int | None = None
    api_key_name: str = ""

    def __post_init__(self) -> None:
        if self.via not in AuditEntry.Via.values:
            raise ValueError(f"via must be one of {AuditEntry.Via.values}, not {self.via!r}")

    def __str__(self) -> str:
        return f"{self.via}:{self.user}"

    @classmethod
    def api(cls, user: object, api_key: object = None) -> Actor:
        """A call through ``api_key`` (an ApiKey row; None: no key to name) by its ``user``."""
        key_id = getattr(api_key, "pk", None)
        return cls(
            user=_username(user),
            via=AuditEntry.Via.API,
            api_key_id=key_id,
            api_key_name=str(getattr(api_key, "name", "")) if key_id is not None else "",
        )

    @classmethod
    def admin(cls, user: object) -> Actor:
        return cls(user=_username(user), via=AuditEntry.Via.ADMIN)

    @classmethod
    def command(cls, user: str | None = None) -> Actor:
        """A management command (or any code run by an operator): the operating-system user by default."""
        if user is None:
            try:
                user = getpass.getuser()
            except (KeyError, OSError):  # no passwd entry (some containers)
                user = ""
        return cls(user=user, via=AuditEntry.Via.COMMAND)


#: What a service records when its caller names no actor: code run directly (scripts, the demo's
#: seeding, `manage.py shell`). Views, the admin and commands always pass their own.
UNATTRIBUTED = Actor(user="", via=AuditEntry.Via.COMMAND)


def _username(user: object) -> str:
    if user is None:
        return ""
    get_username = getattr(user, "get_username", None)
    return str(get_username() if callable(get_username) else user)


# --- the entry as the API shows it --------------------------------------------------------------


def entry_actor(entry: AuditEntry) -> dict[str, Any]:
    """``{"user", "via"}``, with ``apiKeyId`` and ``apiKeyName`` only for a change made through a key.

    Entries made before keys were named (migration 0012) have none: their body, hence their hash, is
    what it was when they were written.
    """
    actor: dict[str, Any] = {"user": entry.actor_user, "via": entry.actor_via}
    if entry.actor_api_key_id is not None:
        actor["apiKeyId"] = entry.actor_api_key_id
        actor["apiKeyName"] = entry.actor_api_key_name
    return actor


def entry_body(entry: AuditEntry) -> dict[str, Any]:
    """The API representation of ``entry`` without ``hash`` (what the hash covers)."""
    return {
        "id": str(entry.id),
        "at": api_datetime(entry.at),
        "actor": entry_actor(entry),
        "action": entry.action,
        "objectType": entry.object_type,
        "objectId": entry.object_id,
        "before": entry.before,
        "after": entry.after,
        "prevHash": entry.prev_hash,
    }


def entry_representation(entry: AuditEntry) -> dict[str, Any]:
    return {**entry_body(entry), "hash": entry.hash}


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def chain_hash(prev_hash: str, body: Mapping[str, Any]) -> str:
    """The entry's hash: SHA-256 of prevHash, a newline and the canonical JSON of its body."""
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + canonical_json(body)).hexdigest()


def _stable(value: Any) -> Any:
    """``value`` as the database will give it back, so the hash made now verifies later.

    Decimals become numbers (as the API shows them: integral ones as integers), UUIDs and
    datetimes strings (Django's encoder); floats that jsonb would return differently (-0.0,
    integral values written in exponent form) are normalised.
    """

    def numbers(item: Any) -> Any:
        if isinstance(item, Decimal):
            return int(item) if item == item.to_integral_value() else float(item)
        if isinstance(item, Mapping):
            return {key: numbers(v) for key, v in item.items()}
        if isinstance(item, list | tuple):
            return [numbers(v) for v in item]
        return item

    def fix(item: Any) -> Any:
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("audit values must be finite numbers")
            if item == 0:
                return 0.0
            if item.is_integer() and abs(item) >= 1e16:
                return int(item)
            return item
        if isinstance(item, dict):
            return {str(k): fix(v) for k, v in item.items()}
        if isinstance(item, list):
            return [fix(v) for v in item]
        return item

    return fix(json.loads(json.dumps(numbers(value), cls=DjangoJSONEncoder)))


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the keys whose values differ, for ``before``/``after`` of an update (e.g. pool.update)."""
    keys = [key for key in after if before.get(key) != after.get(key)]
    return {key: before.get(key) for key in keys}, {key: after[key] for key in keys}


# --- writing ----------------------------------------------------------------------------------
def _lock_chain(tenant_id: int | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [AUDIT_LOCK_CLASS, tenant_id or 0])


def _chain(tenant_id: int | None) -> QuerySet[AuditEntry]:
    """One chain's entries: a tenant's, or the system chain (no tenant)."""
    if tenant_id is None:
        return AuditEntry.objects.filter(tenant__isnull=True)
    return AuditEntry.objects.filter(tenant_id=tenant_id)


def audit_record(
    *,
    tenant: Tenant | None,
    actor: Actor | None,
    action: str,
    object_type: str,
    object_id: UUID | int | str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Append one entry to ``tenant``'s chain (None: the system chain). Call it inside the change's
    transaction: the entry commits, or rolls back, with the change. The chain stays locked until then."""
    actor = actor or UNATTRIBUTED
    tenant_id = tenant.pk if tenant is not None else None
    with transaction.atomic():
        _lock_chain(tenant_id)
        last = _chain(tenant_id).order_by("-seq").values("seq", "hash").first()
        entry = AuditEntry(
            tenant_id=tenant_id,
            seq=(last["seq"] + 1) if last else 1,
            at=timezone.now(),
            actor_user=actor.user,
            actor_via=actor.via,
            actor_api_key_id=actor.api_key_id,
            actor_api_key_name=actor.api_key_name,
            action=action,
            object_type=object_type,
            object_id=str(object_id),
            before=_stable(dict(before)) if before is not None else None,
            after=_stable(dict(after)) if after is not None else None,
            prev_hash=last["hash"] if last else GENESIS_HASH,
        )
        entry.hash = chain_hash(entry.prev_hash, entry_body(entry))
        entry.save(force_insert=True)
    return entry


# --- verifying --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChainBreak:
    tenant: str  # slug, or "(system)"
    entry_id: str
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"chain {self.tenant}: entry {self.entry_id} (#{self.seq}): {self.reason}"


def _chain_break(entries: Iterator[AuditEntry], label: str) -> ChainBreak | None:
    prev_hash, expected_seq = GENESIS_HASH, 1
    for entry in entries:
        if entry.seq != expected_seq:
            return ChainBreak(label, str(entry.id), entry.seq, f"expected entry #{expected_seq} (one is missing)")
        if entry.prev_hash != prev_hash:
            return ChainBreak(label, str(entry.id), entry.seq, "prevHash is not the previous entry's hash")
        if chain_hash(entry.prev_hash, entry_body(entry)) != entry.hash:
            return ChainBreak(label, str(entry.id), entry.seq, "hash does not match the entry's content")
        prev_hash, expected_seq = entry.hash, expected_seq + 1
    return None


def audit_verify(*, tenant: Tenant | None = None, system: bool = True) -> ChainBreak | None:
    """The first bad entry of the chains (``tenant``'s, or every tenant's and the system's), or None."""
    chains: list[tuple[int | None, str]]
    if tenant is not None:
        chains = [(tenant.pk, tenant.slug)]
    else:
        chains = [(t.pk, t.slug) for t in Tenant.objects.order_by("slug")]
        if system:
            chains.append((None, "(system)"))
    for tenant_id, label in chains:
        entries = _chain(tenant_id).order_by("seq").iterator(chunk_size=2000)
        found = _chain_break(entries, label)
        if found is not None:
            return found
    return None
