"""What a node is told to run: the daemon section, and where a node goes back to.

``spec.daemon`` is ``{"version", "url", "sha256", "release"}``: ``release`` is
the DSSE envelope exactly as registered, so that the node verifies what it
runs against the release keys, not against the server (docs/signing.md#what-an-agent-checks).
``daemon_section`` builds it, the one place that does; ``SignedRelease`` reads a
release's row once and shares its sections, so that a tick starting 5,000 nodes
parses one envelope, not 5,000.

A node goes back (on a timeout, a readiness failure, a refusal or a rollback)
to the release it ran before: the section of its previous version when that
release is registered, else the section of the version its agent reported when
the upgrade started (when registered). Agents below FLEET_MIN_PROTOCOL_VERSION
do not apply spec.daemon: they get a ``daemon.upgrade`` command with the same section.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import JSONField, OuterRef, QuerySet, Subquery
from django.db.models.expressions import Func
from django.db.models.fields.json import KeyTransform

from fleet.interface import Command, Node, commands_cancel, commands_enqueue, nodes_set_daemon
from rollout import conf
from rollout.models import NodeUpgrade, Release, ReleaseBinary


@dataclass
class SignedRelease:
    """What spec.daemon needs of one registered release, read once: its envelope and each arch's sha256."""

    version: str
    envelope: str  # as registered
    sha256_by_arch: dict[str, str]
    _sections: dict[str, dict[str, Any] | None] = field(default_factory=dict, repr=False)
    _envelope_object: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def envelope_object(self) -> dict[str, Any]:
        """The registered envelope as a JSON object (parsed once; the payload string is the signed bytes)."""
        if self._envelope_object is None:
            self._envelope_object = json.loads(self.envelope)
        return self._envelope_object

    def section(self, arch: str) -> dict[str, Any] | None:
        """``daemon_section`` for ``arch``, built once: every node of that arch shares it (read-only)."""
        if arch not in self._sections:
            self._sections[arch] = daemon_section(release=self, arch=arch)
        return self._sections[arch]


def daemon_section(*, release: SignedRelease, arch: str) -> dict[str, Any] | None:
    """``spec.daemon`` for a node of ``arch`` to run ``release``; None when it has no binary for that arch.

    ``url`` is None without a downloads URL (creating a rollout then answers 503 ``no_downloads_url``).
    """
    sha256 = release.sha256_by_arch.get(arch)
    if sha256 is None:
        return None
    return {
        "version": release.version,
        "url": conf.binary_url(release.version, f"linux-{arch}"),
        "sha256": sha256,
        "release": release.envelope_object,
    }


def signed_releases(
    *, versions: Iterable[str] = (), ids: Iterable[int] = (), unexpired_at: datetime | None = None
) -> dict[str, SignedRelease]:
    """The registered releases of these versions or ids, by version: two queries, whatever their number.

    ``unexpired_at``: only the releases that have not expired at that time.
    """
    wanted = Release.objects.filter(version__in=set(versions)) | Release.objects.filter(pk__in=set(ids))
    if unexpired_at is not None:
        wanted = wanted.exclude(Release.expired_q(unexpired_at))
    rows = list(wanted.values_list("pk", "version", "envelope"))
    binaries: dict[int, dict[str, str]] = {pk: {} for pk, _, _ in rows}
    for release_id, arch, sha256 in ReleaseBinary.objects.filter(release_id__in=list(binaries)).values_list(
        "release_id", "arch", "sha256"
    ):
        binaries[release_id][arch] = sha256
    return {
        version: SignedRelease(version=version, envelope=envelope, sha256_by_arch=binaries[pk])
        for pk, version, envelope in rows
    }


def registered_daemon_section(
    *, version: str, arch: str, unexpired_at: datetime | None = None
) -> dict[str, Any] | None:
    """The section of a registered version for ``arch`` (a node created in a pool with a default version), or None.

    ``unexpired_at``: None as well when the release has expired by then.
    """
    release = signed_releases(versions=[version], unexpired_at=unexpired_at).get(version)
    return release.section(arch) if release is not None else None


class DaemonWithoutRelease(Func):
    """A daemon section without its signed envelope: what ``previous_daemon`` keeps (the registry holds
    the envelope; a send-back builds the section again from it)."""

    output_field = JSONField()

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, Any]:  # type: ignore[override]
        daemon, params = compiler.compile(self.source_expressions[0])
        sql = f"CASE WHEN jsonb_typeof({daemon}) = 'object' THEN {daemon} - 'release' ELSE {daemon} END"
        return sql, (*params, *params, *params)


def previous_daemon() -> Subquery:
    """What a starting upgrade records as ``previous_daemon``: its node's spec.daemon, without the envelope."""
    nodes = Node.objects.filter(pk=OuterRef("node_id"))
    return Subquery(nodes.annotate(daemon=DaemonWithoutRelease(KeyTransform("daemon", "spec"))).values("daemon")[:1])


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


def _with_registered_previous(rows: list[SendBack]) -> list[SendBack]:
    """Each row with the registered section of the release its node ran before (two queries)."""
    if not rows:
        return rows
    versions = {(row.previous_daemon or {}).get("version") or row.previous_version for row in rows}
    registered = signed_releases(versions=[version for version in versions if isinstance(version, str)])
    result = []
    for row in rows:
        version = (row.previous_daemon or {}).get("version") if row.previous_daemon else row.previous_version
        release = registered.get(version) if isinstance(version, str) else None
        result.append(dataclasses.replace(row, section=release.section(row.arch) if release else None))
    return result


def set_daemons(assignments: Iterable[tuple[UUID, dict[str, Any] | None]]) -> None:
    """Set spec.daemon per node: one UPDATE per distinct section, not per node.

    Sections are grouped by identity: ``SignedRelease.section`` gives every node of an arch the same
    object, so grouping costs nothing per node (serialising a 2 KB section per node would).
    """
    groups: dict[int, tuple[dict[str, Any] | None, list[UUID]]] = {}
    for node_id, section in assignments:
        groups.setdefault(id(section), (section, []))[1].append(node_id)
    for section, node_ids in groups.values():
        nodes_set_daemon(node_ids=node_ids, daemon=section)


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
