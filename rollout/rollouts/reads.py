"""Reads of rollouts for the API and the admin, in a constant number of queries."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db.models import Count

from rollout.models import NodeUpgrade, Rollout, RolloutApproval, RolloutWave

State = NodeUpgrade.State


@dataclass
class WaveStats:
    """One wave of a rollout with its nodes counted by upgrade state."""

    index: int
    percent: int | float
    total: int
    started_at: datetime | None = None
    settled_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(State.values, 0))

    @property
    def pending(self) -> int:
        return self.counts[State.PENDING]

    @property
    def in_flight(self) -> int:
        return self.counts[State.IN_FLIGHT]

    @property
    def succeeded(self) -> int:
        return self.counts[State.SUCCEEDED]

    @property
    def failed(self) -> int:
        return self.counts[State.FAILED]

    @property
    def skipped(self) -> int:
        return self.counts[State.SKIPPED]

    @property
    def rolled_back(self) -> int:
        return self.counts[State.ROLLED_BACK]

    @property
    def cancelled(self) -> int:
        return self.counts[State.CANCELLED]


def rollout_waves(rollouts: Iterable[Rollout]) -> dict[UUID, list[WaveStats]]:
    """Per rollout, its waves with counts by state: two queries for any number of rollouts."""
    ids = [rollout.id for rollout in rollouts]
    counts: dict[tuple[UUID, int], dict[str, int]] = defaultdict(dict)
    rows = (
        NodeUpgrade.objects.filter(rollout_id__in=ids)
        .values("rollout_id", "wave", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        counts[(row["rollout_id"], row["wave"])][row["state"]] = row["n"]
    waves: dict[UUID, list[WaveStats]] = defaultdict(list)
    for wave in RolloutWave.objects.filter(rollout_id__in=ids).order_by("rollout_id", "index"):
        percent = wave.percent
        stats = WaveStats(
            index=wave.index,
            percent=int(percent) if percent == percent.to_integral_value() else float(percent),
            total=wave.total,
            started_at=wave.started_at,
            settled_at=wave.settled_at,
        )
        stats.counts.update(counts[(wave.rollout_id, wave.index)])
        waves[wave.rollout_id].append(stats)
    return waves


def rollout_approvals(rollouts: Iterable[Rollout]) -> dict[UUID, list[RolloutApproval]]:
    """Per rollout, its approvals, oldest first: one query for any number of rollouts."""
    approvals: dict[UUID, list[RolloutApproval]] = defaultdict(list)
    ids = [rollout.id for rollout in rollouts]
    if ids:
        for approval in RolloutApproval.objects.filter(rollout_id__in=ids).order_by("at", "id"):
            approvals[approval.rollout_id].append(approval)
    return approvals


def approval_counts(rollouts: Iterable[Rollout]) -> dict[UUID, int]:
    """How many approvals each rollout awaiting approval has (one query; none for the others)."""
    ids = [rollout.id for rollout in rollouts if rollout.state == Rollout.State.AWAITING_APPROVAL]
    if not ids:
        return {}
    rows = RolloutApproval.objects.filter(rollout_id__in=ids).values("rollout_id").annotate(n=Count("id")).order_by()
    return {row["rollout_id"]: row["n"] for row in rows}


def creator_names(rollouts: Iterable[Rollout]) -> dict[int, str]:
    """{user id: username} of the rollouts' creators (one query)."""
    ids = {rollout.created_by_id for rollout in rollouts if rollout.created_by_id is not None}
    if not ids:
        return {}
    User = get_user_model()
    return dict(User.objects.filter(pk__in=ids).values_list("pk", User.USERNAME_FIELD))


def successor_ids(rollouts: Sequence[Rollout]) -> dict[UUID, UUID]:
    """{superseded rollout id: the id of the rollout that superseded it} for these rollouts: one query, none when
    none of them is superseded (docs/controller.md#undoing-a-bad-release)."""
    ids = [rollout.id for rollout in rollouts if rollout.state == Rollout.State.SUPERSEDED]
    if not ids:
        return {}
    pairs = Rollout.objects.filter(supersedes_id__in=ids).values_list("supersedes_id", "id")
    return {superseded: successor for superseded, successor in pairs if superseded is not None}
