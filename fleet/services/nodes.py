"""Nodes: desired state (``spec``), agent tokens, and the online rule."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import F, Func, Q

from core.errors import Conflict, InvalidInput
from core.maintenance import tables_vacuum
from fleet.labels import labels_validate
from fleet.models import FleetPulse, Node, NodeSession, Pool, Tenant
from fleet.plugins import resolve_daemon_section
from fleet.services.audit import Actor, audit_record
from fleet.tokens import new_token, token_hash

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler

DEFAULT_HEARTBEAT_SECONDS = 10
# A node is online while its agent has heartbeated within this many heartbeat periods.
ONLINE_HEARTBEATS = 3
NODE_NAME_MAX = 200
ARCH_RE = re.compile(r"[a-z0-9_]{1,32}")


def heartbeat_seconds() -> int:
    """settings.FLEET_HEARTBEAT_SECONDS, or 10 when it is not a positive integer (the raw env string)."""
    value = getattr(settings, "FLEET_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS)
    if isinstance(value, bool):
        return DEFAULT_HEARTBEAT_SECONDS
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        return DEFAULT_HEARTBEAT_SECONDS
    return seconds if seconds >= 1 else DEFAULT_HEARTBEAT_SECONDS


def online_since(*, now: datetime) -> datetime:
    return now - timedelta(seconds=ONLINE_HEARTBEATS * heartbeat_seconds())


def online_node_q(*, now: datetime) -> Q:
    """A Q on Node: has a session, has not left, and heartbeated within 3 x heartbeatSeconds of ``now``."""
    return Q(
        session__isnull=False,
        session__left_at__isnull=True,
        session__last_seen_at__gte=online_since(now=now),
    )


def node_list_q(
    *, pool_id: UUID | None = None, daemon_version: str | None = None, online: bool | None = None, now: datetime
) -> Q:
    """The node list's filters (docs/api.md#nodes), each left out when None; combined, they all hold.

    ``daemon_version``: the version the node's agent last reported; ``online``: the rule of ``online_node_q``.
    """
    q = Q()
    if pool_id is not None:
        q &= Q(pool_id=pool_id)
    if daemon_version is not None:
        q &= Q(session__daemon_version=daemon_version)
    if online is not None:
        q &= online_node_q(now=now) if online else ~online_node_q(now=now)
    return q


def node_session(node: Node) -> NodeSession | None:
    """The node's session, or None (no query when loaded with select_related("session"))."""
    try:
        return node.session
    except NodeSession.DoesNotExist:
        return None


def node_is_online(*, node: Node, now: datetime) -> bool:
    """The same rule as ``online_node_q``, for a node loaded with its session."""
    session = node_session(node)
    return session is not None and session.left_at is None and session.last_seen_at >= online_since(now=now)


def _uuid(value: object, *, code: str, what: str) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"{what} {value!r} is not a valid id.", code=code) from exc


def node_create(
    *,
    tenant: Tenant,
    name: str,
    pool_id: UUID,
    arch: str,
    labels: Mapping[str, str] | None = None,
    actor: Actor | None = None,
) -> tuple[Node, str]:
    """A node of ``tenant`` in one of its pools; returns the node and its plain agent token (shown once).

    The node has desired state from creation: when the pool has a default
    daemon version, ``spec.daemon`` is that version's section for the node's
    arch (from the registered daemon resolvers), else None.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > NODE_NAME_MAX:
        raise InvalidInput(f"name must be 1 to {NODE_NAME_MAX} characters.", code="invalid_name")
    if not isinstance(arch, str) or not ARCH_RE.fullmatch(arch):
        raise InvalidInput("arch is 1 to 32 of lowercase letters, digits and '_'.", code="invalid_arch")
    labels = labels_validate({} if labels is None else labels)
    pool_id = _uuid(pool_id, code="unknown_pool", what="poolId")
    pool = Pool.objects.filter(tenant=tenant, pk=pool_id).values("id", "default_daemon_version").first()
    if pool is None:
        raise InvalidInput(f"No pool {pool_id} in this tenant.", code="unknown_pool")
    version = pool["default_daemon_version"]
    daemon = resolve_daemon_section(version, arch) if version else None
    plain = new_token("at")
    node = Node(
        tenant=tenant,
        pool_id=pool_id,
        name=name,
        arch=arch,
        spec={"daemon": daemon},
        labels=labels,
        agent_token_hash=token_hash(plain),
    )
    try:
        with transaction.atomic():
            node.save(force_insert=True)
            audit_record(
                tenant=tenant,
                actor=actor,
                action="node.create",
                object_type="node",
                object_id=node.pk,
                after={"name": name, "poolId": str(pool_id), "arch": arch, "spec": node.spec, "labels": labels},
            )
    except IntegrityError as exc:
        if Node.objects.filter(tenant=tenant, name=name).exists():
            raise Conflict(f"Node {name!r} already exists.", code="node_exists") from exc
        raise
    return node, plain


class _SpecWithDaemon(Func):
    """``spec`` with its "daemon" key replaced and every other key kept, computed by the database."""

    output_field = models.JSONField()

    def __init__(self, daemon: dict[str, Any] | None) -> None:
        super().__init__(F("spec"))
        self.daemon_json = json.dumps(daemon)

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        spec, params = compiler.compile(self.source_expressions[0])
        sql = (
            f"jsonb_set(CASE WHEN jsonb_typeof({spec}) = 'object' THEN {spec} ELSE '{{}}'::jsonb END,"
            " '{daemon}', %s::jsonb)"
        )
        return sql, (*params, *params, self.daemon_json)


def nodes_set_daemon(*, node_ids: Sequence[UUID], daemon: dict[str, Any] | None) -> int:
    """Set ``spec["daemon"]`` of all these nodes in ONE UPDATE, keeping the other spec keys. Returns rows updated."""
    ids = list(node_ids)
    if not ids:
        return 0
    return Node.objects.filter(pk__in=ids).update(spec=_SpecWithDaemon(daemon))


def node_tables_vacuum() -> bool:
    """Vacuum the node rows a rollout rewrites (each started node's spec), their sessions and the fleet pulse
    (core/maintenance.py; docs/operations.md#table-maintenance). False when it did not run."""
    return tables_vacuum([Node, NodeSession, FleetPulse])
