"""Rollout events: one typed payload per kind, one row and one structured log line each, and their webhook deliveries.

A payload is a frozen dataclass with snake_case fields; ``data()`` is its form at the edges (the
event's ``data`` in the API, the webhook body and the log line): camelCase keys, times in ISO 8601.
A field whose default is None is left out while None (a pause by an operator names its actor, a
pause for the failure ratio its counts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import structlog

from rollout.models import Rollout, RolloutEvent
from rollout.webhooks.deliveries import deliveries_create

log = structlog.get_logger("rollout")

Kind = RolloutEvent.Kind


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


@dataclass(frozen=True)
class EventPayload:
    kind: ClassVar[str]

    def data(self) -> dict[str, Any]:
        """The payload as the API, the webhooks and the log lines show it."""
        shown: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.default is None:
                continue
            shown[_camel(field.name)] = value.isoformat() if isinstance(value, datetime) else value
        return shown

    def message(self, *, waves: int) -> str | None:
        """The event in a sentence for a person (its log line's ``message``), waves counted from 1; None for the
        events whose name and data say it all."""
        return None


def wave_words(index: int, *, waves: int) -> str:
    """``wave 2 of 3``: a wave's index (from 0, as the API counts) as a person reads it
    (docs/controller.md#events-and-logs)."""
    return f"wave {index + 1} of {waves}"


@dataclass(frozen=True)
class Created(EventPayload):
    kind = Kind.CREATED
    nodes: int
    waves: list[int]  # nodes per wave
    pool_ids: list[str]
    # Approvals it awaits before it starts (docs/controller.md#approvals); left out when none are required.
    approvals_required: int | None = None
    # The rollout it superseded (docs/controller.md#undoing-a-bad-release); left out when none.
    supersedes: str | None = None


@dataclass(frozen=True)
class WaveStarted(EventPayload):
    kind = Kind.WAVE
    wave: int
    percent: float
    total: int

    def message(self, *, waves: int) -> str:
        return f"{wave_words(self.wave, waves=waves)} started: {self.total} node(s), up to {self.percent:g} %"


@dataclass(frozen=True)
class Paused(EventPayload):
    kind = Kind.PAUSED
    paused_reason: str  # a Rollout.PausedReason: ``pausedReason``, as the rollout and its blockers name it
    actor: str | None = None  # an operator's pause
    # A pause for the failure ratio: the wave and what was judged.
    wave: int | None = None
    failed: int | None = None
    succeeded: int | None = None
    max_failure_ratio: float | None = None
    # A pause by a gate (reason "gate_failed:<name>"): the gate and its latest value.
    gate: str | None = None
    value: float | None = None

    def message(self, *, waves: int) -> str | None:
        if self.wave is None:
            return None
        return (
            f"{wave_words(self.wave, waves=waves)} paused: {self.failed} failed, {self.succeeded} succeeded, "
            f"over the maximum failure ratio {self.max_failure_ratio}"
        )


@dataclass(frozen=True)
class GateFailed(EventPayload):
    """A gate's evaluation failed (docs/controller.md#gates); ``failureLimit`` in a row stop the rollout: ``action``
    (its ``onFailure``: pause, abort, abort_rollback) is named on the failure that reached the limit."""

    kind = Kind.GATE_FAILED
    gate: str
    value: float | None
    consecutive_failures: int
    failure_limit: int
    detail: str
    action: str | None = None


@dataclass(frozen=True)
class Superseded(EventPayload):
    """A newer rollout took this one's place at its create (docs/controller.md#undoing-a-bad-release)."""

    kind = Kind.SUPERSEDED
    superseded_by: str
    superseded_by_version: str  # the newer rollout's release
    actor: str
    cancelled: int  # its pending rows
    taken_over: int  # its in-flight rows the newer rollout took over
    still_in_flight: int  # its in-flight rows outside the newer rollout's selection: they settle here


@dataclass(frozen=True)
class Started(EventPayload):
    """A scheduled rollout became active: at its ``startAt`` (actor "schedule") or started by an operator."""

    kind = Kind.STARTED
    actor: str
    start_at: datetime | None


@dataclass(frozen=True)
class DeadlinePassed(EventPayload):
    """The rollout's ``endBy`` came before it finished: it stops starting nodes and does ``endBehavior``."""

    kind = Kind.DEADLINE
    end_by: datetime | None
    end_behavior: str


@dataclass(frozen=True)
class Resumed(EventPayload):
    kind = Kind.RESUMED
    actor: str


@dataclass(frozen=True)
class Promoted(EventPayload):
    kind = Kind.PROMOTED
    wave: int
    soak_ends_at: datetime | None
    actor: str

    def message(self, *, waves: int) -> str:
        return f"{wave_words(self.wave, waves=waves)} promoted by {self.actor}: its soak ends now"


@dataclass(frozen=True)
class Completed(EventPayload):
    kind = Kind.COMPLETED
    #: Node upgrades by state (state values as keys: ``succeeded``, ``skipped``...), states with none left out.
    totals: dict[str, int]

    def data(self) -> dict[str, Any]:
        return dict(self.totals)


@dataclass(frozen=True)
class Aborted(EventPayload):
    kind = Kind.ABORTED
    actor: str
    rollback: bool
    cancelled: int
    rolled_back: int
    not_rolled_back: int
    still_in_flight: int
    reason: str | None = None  # its ``abortedReason``


@dataclass(frozen=True)
class Approved(EventPayload):
    """The last approval it needed: the rollout starts (docs/controller.md#approvals)."""

    kind = Kind.APPROVED
    actor: str  # who gave the last approval
    approvals: list[str]  # every approver, oldest first


@dataclass(frozen=True)
class Denied(EventPayload):
    """Denied while awaiting approval: it ends, its nodes are free (docs/controller.md#approvals)."""

    kind = Kind.DENIED
    actor: str
    comment: str
    cancelled: int


@dataclass(frozen=True)
class NodeUpgradeRefused(EventPayload):
    """A node's agent refused the release (docs/signing.md#what-an-agent-checks); its upgrade failed at once."""

    kind = Kind.NODE_UPGRADE_REFUSED
    node: str
    code: str
    detail: str


def event_record(*, rollout: Rollout, payload: EventPayload, at: datetime) -> RolloutEvent:
    data = payload.data()
    event = RolloutEvent.objects.create(rollout=rollout, kind=payload.kind, at=at, data=data)
    message = payload.message(waves=len(rollout.waves))
    log.info(
        payload.kind,
        **({"message": message} if message is not None else {}),
        tenant=rollout.tenant_id,
        rollout=str(rollout.id),
        version=rollout.release.version,
        state=rollout.state,
        **data,
    )
    # Rows only (same transaction); the POSTs happen in their own tasks, after the commit.
    deliveries_create(event=event, rollout=rollout)
    return event
