"""The rollout as the outside sees it: the API's representation and the webhooks' (docs/api.md#rollouts).

The edge where names turn camelCase and times turn into the API's strings (ISO 8601, UTC, ``Z``).
``rollouts_json`` reads what it needs for many rollouts in a constant number of queries; the
API's serializer (rollout/api/serializers.py) and the webhook bodies (rollout/webhooks/deliveries.py)
both render through ``rollout_json``, so a webhook carries exactly what ``GET /rollouts/{id}/`` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from core.times import api_datetime
from rollout.models import Rollout, RolloutApproval
from rollout.rollouts.blockers import Blocker, rollout_blockers
from rollout.rollouts.reads import WaveStats, creator_names, rollout_approvals, rollout_waves, successor_ids

#: A JSON value as the API writes it.
JSON = Any


def blocker_json(blocker: Blocker | None) -> dict[str, JSON] | None:
    """A blocker as the API shows it: ``{"code", "detail", ...extra}``."""
    if blocker is None:
        return None
    extra = {key: api_datetime(value) if isinstance(value, datetime) else value for key, value in blocker.extra.items()}
    return {"code": blocker.code, "detail": blocker.detail, **extra}


def wave_json(wave: WaveStats) -> dict[str, JSON]:
    return {
        "index": wave.index,
        "percent": wave.percent,
        "total": wave.total,
        "pending": wave.pending,
        "inFlight": wave.in_flight,
        "succeeded": wave.succeeded,
        "failed": wave.failed,
        "skipped": wave.skipped,
        "rolledBack": wave.rolled_back,
        "cancelled": wave.cancelled,
        "startedAt": api_datetime(wave.started_at),
        "settledAt": api_datetime(wave.settled_at),
    }


def approval_json(approval: RolloutApproval) -> dict[str, JSON]:
    return {"user": approval.username, "at": api_datetime(approval.at), "comment": approval.comment}


def rollout_json(
    rollout: Rollout,
    *,
    waves: Sequence[WaveStats],
    blocker: Blocker | None,
    approvals: Sequence[RolloutApproval] = (),
    created_by: str | None = None,
    superseded_by: UUID | None = None,
) -> dict[str, JSON]:
    """The rollout (loaded with ``release`` and ``pools``), its waves counted, its blocker, its approvals
    (oldest first), its creator's username and the id of the rollout that superseded it."""
    return {
        "id": str(rollout.id),
        "version": rollout.release.version,
        "state": str(rollout.state),
        "poolIds": sorted(str(pool.id) for pool in rollout.pools.all()),
        "selector": rollout.selector,
        "startAt": api_datetime(rollout.start_at),
        "endBy": api_datetime(rollout.end_by),
        "endBehavior": rollout.end_behavior,
        "waves": [wave_json(wave) for wave in waves],
        "currentWave": rollout.current_wave,
        "maxFailureRatio": float(rollout.max_failure_ratio),
        "soakSeconds": rollout.soak_seconds,
        "upgradeTimeoutSeconds": rollout.upgrade_timeout_seconds,
        "minReadySeconds": rollout.min_ready_seconds,
        "failureRatioMinSettled": rollout.failure_ratio_min_settled,
        "gateIntervalSeconds": rollout.gate_interval_seconds,
        "gateFailureLimit": rollout.gate_failure_limit,
        "pausedReason": str(rollout.paused_reason) if rollout.paused_reason is not None else None,
        "createdAt": api_datetime(rollout.created_at),
        "completedAt": api_datetime(rollout.completed_at),
        "abortedReason": rollout.aborted_reason,
        "supersedes": str(rollout.supersedes_id) if rollout.supersedes_id is not None else None,
        "supersededBy": str(superseded_by) if superseded_by is not None else None,
        "blocker": blocker_json(blocker),
        "excluded": {"newer": rollout.excluded_newer},
        "lastTickAt": api_datetime(rollout.last_tick_at),
        "createdBy": created_by,
        "approvalsRequired": rollout.approvals_required,
        "approvals": [approval_json(approval) for approval in approvals],
    }


def rollouts_json(
    rollouts: Sequence[Rollout],
    *,
    now: datetime,
    waves: Mapping[UUID, list[WaveStats]] | None = None,
    blockers: Mapping[UUID, Blocker | None] | None = None,
) -> list[dict[str, JSON]]:
    """Many rollouts, their waves, blockers, approvals and creators read at once (a constant number of
    queries) unless given."""
    waves = rollout_waves(rollouts) if waves is None else waves
    blockers = rollout_blockers(rollouts, now=now) if blockers is None else blockers
    approvals = rollout_approvals(rollouts)
    creators = creator_names(rollouts)
    successors = successor_ids(rollouts)
    return [
        rollout_json(
            rollout,
            waves=waves.get(rollout.id, []),
            blocker=blockers.get(rollout.id),
            approvals=approvals.get(rollout.id, []),
            created_by=creators.get(rollout.created_by_id) if rollout.created_by_id is not None else None,
            superseded_by=successors.get(rollout.id),
        )
        for rollout in rollouts
    ]
