"""What a node is told to run: the daemon section a start sets, and where a node goes back to.

A node goes back (on a timeout, a readiness failure or a rollback) to the
release it ran before: its previous section when that release is registered,
else the section of the version its agent reported when the upgrade started
(when registered). Agents below FLEET_MIN_PROTOCOL_VERSION do not apply
spec.daemon: they get a ``daemon.upgrade`` command with the same section.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import QuerySet

from fleet.interface import Command, commands_cancel, commands_enqueue, nodes_set_daemon
from rollout import conf
from rollout.models import NodeUpgrade, ReleaseBinary


@dataclass(frozen=True)
class SendBack:
    """An in-flight node upgrade that may be sent back, read under its row lock."""

    id: int
    node_id: UUID
    arch: str
    protocol_version: int | None
    previous_daemon: dict[str, Any] | None
    previous_version: str | None
    rollout_id: UUID
    rollout_state: str
    tenant_id: int
    #: The registered section it goes back to (None: its previous release is not registered).
    section: dict[str, Any] | None = None


_FIELDS = {
    "id": "id",
    "node_id": "node_id",
    "arch": "node__arch",
    "protocol_version": "node__session__protocol_version",
    "previous_daemon": "previous_daemon",
    "previous_version": "previous_version",
    "rollout_id": "rollout_id",
    "rollout_state": "rollout__state",
    "tenant_id": "rollout__tenant_id",
}


def send_back_rows(queryset: QuerySet[NodeUpgrade]) -> list[SendBack]:
    """The rows of ``queryset`` (node upgrades, already locked by the caller), each with its registered section."""
    rows = [
        SendBack(**{name: row[path] for name, path in _FIELDS.items()}) for row in queryset.values(*_FIELDS.values())
    ]
    return _with_registered_previous(rows)


def min_protocol_version() -> int:
    value = settings.FLEET_MIN_PROTOCOL_VERSION
    return value if isinstance(value, int) else 2


def daemon_section(*, version: str, arch: str, sha256: str) -> dict[str, Any]:
    """``spec.daemon`` for a node of ``arch`` running ``version``."""
    return {"version": version, "url": conf.binary_url(version, f"linux-{arch}"), "sha256": sha256}


def _with_registered_previous(rows: list[SendBack]) -> list[SendBack]:
    """Each row with the daemon section its node ran before, when that release is registered. One query."""
    if not rows:
        return rows
    versions = {(row.previous_daemon or {}).get("version") or row.previous_version for row in rows}
    binaries = {
        (version, arch): sha256
        for version, arch, sha256 in ReleaseBinary.objects.filter(release__version__in=versions).values_list(
            "release__version", "arch", "sha256"
        )
    }
    result = []
    for row in rows:
        section: dict[str, Any] | None
        if row.previous_daemon:
            known = (row.previous_daemon.get("version"), row.arch) in binaries
            section = row.previous_daemon if known else None
        else:
            version = row.previous_version
            sha256 = binaries.get((version, row.arch)) if version else None
            url = conf.binary_url(version, f"linux-{row.arch}") if version else None
            section = {"version": version, "url": url, "sha256": sha256} if sha256 and url else None
        result.append(dataclasses.replace(row, section=section))
    return result


def set_daemons(assignments: Iterable[tuple[UUID, dict[str, Any] | None]]) -> None:
    """Set spec.daemon per node: one UPDATE per distinct section, not per node."""
    groups: dict[str, list[UUID]] = defaultdict(list)
    for node_id, section in assignments:
        groups[json.dumps(section, sort_keys=True)].append(node_id)
    for key, node_ids in groups.items():
        nodes_set_daemon(node_ids=node_ids, daemon=json.loads(key))


def send_back(rows: Sequence[SendBack], *, fallback_to_previous: bool) -> None:
    """Set each node's spec.daemon back to its registered previous section.

    ``fallback_to_previous``: a node whose previous release is not registered
    gets literally its previous section (possibly none) instead of keeping the
    target. Old agents get a ``daemon.upgrade`` command with the section (it
    supersedes the pending one); others just lose their pending command.
    """
    targets = [(row, row.section or (row.previous_daemon if fallback_to_previous else None)) for row in rows]
    set_daemons((row.node_id, section) for row, section in targets)
    minimum = min_protocol_version()
    old = [(row.node_id, section) for row, section in targets if section and (row.protocol_version or 0) < minimum]
    old_ids = {node_id for node_id, _ in old}
    commands_cancel(
        node_ids=[row.node_id for row, _ in targets if row.node_id not in old_ids], kind=Command.Kind.DAEMON_UPGRADE
    )
    if old:
        commands_enqueue(node_ids_payloads=old, kind=Command.Kind.DAEMON_UPGRADE)
