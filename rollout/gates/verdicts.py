"""Gates (docs/controller.md#gates): their rows, and what the tick and the blockers read.

The options are checked in rollout/gates/spec.py.

A gate is a health signal a rollout waits on: a Prometheus query whose every sample must stay at
most ``max``, or an HTTP URL that must answer 2xx. The evaluation task asks them
(rollout/controller/gate_evaluation.py) and stores each one's latest result; everything here reads
those stored results only, never the network:

- the tick: ``with_gate_verdicts`` annotates the query that locks the rollout with ``gate_failed``
  (the first gate whose failures in a row reached ``gateFailureLimit``), so that pause costs no query;
- the plan (rollout/controller/plan.py), which the tick executes and the blockers render:
  ``gates_holding_for``, the first gate whose latest result is not a pass taken within two
  intervals (one query for any number of rollouts);
- the API and the admin: ``gates_of``, ``gate_json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db.models import OuterRef, Q, QuerySet, Subquery

from rollout.gates.probe import MAX_DETAIL, Outcome
from rollout.gates.spec import GateOptions
from rollout.models import Rollout, RolloutGate


def gates_create(
    *, rollout: Rollout, options: GateOptions, now: datetime, first: Sequence[Outcome | None] = ()
) -> None:
    """The rollout's gate rows, in the create's transaction, due at once: pending, or with the result of its first
    look (``first``, asked before the transaction) when that was not a pass, so that an unreachable Prometheus
    shows its error at once (``inconclusive``). A first pass is not a verdict a node starts on: the evaluation
    gives the first one (due at once); a first failure counts none."""
    looks = list(first) or [None] * len(options.gates)
    RolloutGate.objects.bulk_create(
        RolloutGate(
            rollout=rollout,
            position=position,
            name=spec.name,
            kind=spec.kind,
            query=spec.query,
            maximum=spec.maximum,
            url=spec.url,
            on_failure=spec.on_failure,
            due_at=now,
            **_first_result(look, now=now),
        )
        for position, (spec, look) in enumerate(zip(options.gates, looks, strict=True))
    )


def _first_result(look: Outcome | None, *, now: datetime) -> dict[str, Any]:
    if look is None or look.state == RolloutGate.State.PASS:
        return {}
    return {"state": look.state, "value": look.value, "detail": (look.detail or "")[:MAX_DETAIL], "at": now}


def gates_counts_clear(*, rollout: Rollout, now: datetime) -> None:
    """On resume: every gate's failures in a row start again from 0, and each is asked again at once."""
    RolloutGate.objects.filter(rollout=rollout).update(consecutive_failures=0, due_at=now)


# --- reads -------------------------------------------------------------------------------------


def _not_fresh(now: datetime) -> Q:
    return Q(fresh_until__isnull=True) | Q(fresh_until__lt=now)


def with_gate_verdicts(queryset: QuerySet[Rollout], *, now: datetime) -> QuerySet[Rollout]:
    """Rollouts annotated (in the same query) with ``gate_failed`` (a name or None)."""
    gates = RolloutGate.objects.filter(rollout=OuterRef("pk"))
    failed = gates.filter(consecutive_failures__gte=OuterRef("gate_failure_limit")).order_by("position")
    return queryset.annotate(
        gate_failed=Subquery(failed.values("name")[:1]),
    )


def gates_holding_for(rollout_ids: Iterable[UUID], *, now: datetime) -> dict[UUID, RolloutGate]:
    """{rollout id: its first gate (in the order given) whose latest result is not a fresh pass}: one query."""
    holding: dict[UUID, RolloutGate] = {}
    rows = RolloutGate.objects.filter(rollout_id__in=list(rollout_ids)).filter(_not_fresh(now))
    for gate in rows.order_by("rollout_id", "position"):
        holding.setdefault(gate.rollout_id, gate)
    return holding


def gates_of(rollout: Rollout) -> Sequence[RolloutGate]:
    return list(RolloutGate.objects.filter(rollout=rollout).order_by("position"))


def gate_json(gate: RolloutGate) -> dict[str, Any]:
    """A gate's latest result as the API shows it (``GET /rollouts/{id}/gates/``)."""
    at = gate.at.astimezone(UTC).isoformat().replace("+00:00", "Z") if gate.at is not None else None
    return {
        "name": gate.name,
        "state": str(gate.state),
        "value": gate.value,
        "at": at,
        "consecutiveFailures": gate.consecutive_failures,
        "detail": gate.detail or None,
        "onFailure": gate.on_failure,
    }
