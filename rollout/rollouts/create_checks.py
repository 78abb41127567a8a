"""What a create refuses before it takes a node, because it could not work (docs/controller.md#create).

- Nodes that run a release of a higher sequence than the target would refuse it (an agent never goes
  back past a release it confirmed, docs/signing.md#what-an-agent-checks): they are left out of the
  snapshot and counted (``excluded.newer``); when that is every node, 400 ``sequence_rollback``.
- A platform of a snapshotted node that the manifest lists but whose bytes are not stored (never
  uploaded, or gone from the store): 400 ``binary_missing``, upload first. A platform the manifest does
  not list at all is not refused here: those nodes are skipped at their turn (``no_binary``).
- Nodes another rollout holds (active, paused, scheduled or awaiting approval): 409 ``conflict`` naming
  the nodes, the rollouts and, in words, the states they are in (``Taken``, ``conflict_raise``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from django.db.models import QuerySet

from core.errors import Conflict, InvalidInput
from fleet.interface import Node
from rollout.models import Release, binary_storage_name
from rollout.registry import storage
from rollout.words import a_rollout, state_words

SEQUENCE_ROLLBACK_DETAIL = (
    "Every chosen node runs a release with a higher sequence than {version} (#{sequence}), and nodes refuse "
    "older releases. To roll back, sign the old binary again as a new release with a higher sequence, "
    "register it and roll out that."
)


#: Rollout ids named in a conflict's detail (``rolloutIds`` lists them all).
ECHOED_IDS = 10


@dataclass(frozen=True)
class Taken:
    """Nodes already held, the rollouts that hold them (``nodeIds``, ``rolloutIds`` of a 409 ``conflict``) and
    the state of each of those rollouts (for the detail)."""

    node_ids: list[str]
    rollout_ids: list[str]
    states: list[str]  # one per rollout id

    @classmethod
    def of(cls, rows: Iterable[tuple[UUID, UUID, str]]) -> Taken | None:
        rows = list(rows)
        if not rows:
            return None
        state_of = {str(rollout_id): state for _, rollout_id, state in rows}
        rollout_ids = sorted(state_of)
        return cls(
            node_ids=sorted({str(node_id) for node_id, _, _ in rows}),
            rollout_ids=rollout_ids,
            states=[state_of[rollout_id] for rollout_id in rollout_ids],
        )

    def holders(self) -> str:
        """ "an active rollout", "a rollout awaiting approval", "2 rollouts (1 active, 1 paused)"."""
        if not self.states:
            return "another rollout"  # one created meanwhile: the unique index said so, not which
        if len(self.states) == 1:
            return a_rollout(self.states[0])
        counts = Counter(self.states)
        parts = ", ".join(f"{n} {state_words(state)}" for state, n in sorted(counts.items()))
        return f"{len(self.states)} rollouts ({parts})"


def conflict_raise(taken: Taken) -> None:
    nodes = len(taken.node_ids)
    shown = ", ".join(taken.rollout_ids[:ECHOED_IDS])
    more = f" and {len(taken.rollout_ids) - ECHOED_IDS} more" if len(taken.rollout_ids) > ECHOED_IDS else ""
    held = f": {shown}{more}" if shown else ""
    raise Conflict(
        f"{nodes} {'node is' if nodes == 1 else 'nodes are'} already held by {taken.holders()}{held}.",
        code="conflict",
        nodeIds=taken.node_ids,
        rolloutIds=taken.rollout_ids,
    )


@dataclass(frozen=True)
class Eligible:
    """The nodes a create may take, and how many it leaves out because they run a newer release."""

    nodes: QuerySet[Node]
    newer: int


def nodes_eligible(*, candidates: QuerySet[Node], release: Release) -> Eligible:
    """``candidates`` without the nodes whose agent reports a version of a higher sequence than ``release``.

    The version a node runs is the one its session last reported (a node that never joined runs
    nothing the agent could hold against the target). No query beyond the caller's when no release
    is newer than the target, the usual case: rolling forward to the newest.
    """
    newer_versions = list(Release.objects.filter(sequence__gt=release.sequence).values_list("version", flat=True))
    if not newer_versions:
        return Eligible(nodes=candidates, newer=0)
    on_newer = candidates.filter(session__daemon_version__in=newer_versions)
    return Eligible(nodes=candidates.exclude(pk__in=on_newer.values("pk")), newer=on_newer.count())


def sequence_rollback(release: Release) -> InvalidInput:
    return InvalidInput(
        SEQUENCE_ROLLBACK_DETAIL.format(version=release.version, sequence=release.sequence),
        code="sequence_rollback",
    )


def platforms_missing(*, release: Release, archs: set[str]) -> list[str]:
    """The platforms of ``archs`` that the release lists but has no stored bytes for, sorted.

    Stored: uploaded (``stored_at``) and still in the store (a stat, or a HEAD of the object in object
    storage). ``release`` loaded with ``binaries``.
    """
    listed = {binary.platform: binary for binary in release.binaries.all()}
    missing = []
    for platform in sorted(f"linux-{arch}" for arch in archs):
        binary = listed.get(platform)
        if binary is None:
            continue  # not in the manifest: skipped at its turn (no_binary)
        if binary.stored_at is None or not storage.stored(binary_storage_name(release.version, platform)):
            missing.append(platform)
    return missing


def binaries_require_stored(*, release: Release, nodes: QuerySet[Node]) -> None:
    """400 ``binary_missing`` (``platforms``) when a snapshotted node's platform has no stored binary."""
    archs = set(nodes.order_by().values_list("arch", flat=True).distinct())
    missing = platforms_missing(release=release, archs=archs)
    if missing:
        raise InvalidInput(
            f"Release {release.version} has no stored binary for {', '.join(missing)}: upload it first "
            f"(python manage.py release upload {release.version} <platform> <file>, or the release's admin page).",
            code="binary_missing",
            platforms=missing,
        )
