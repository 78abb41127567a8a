"""Evaluating gates (docs/controller.md#gates): claim the due ones, ask them, record the results.

``gates_evaluate_due`` is the periodic task's body (``rollout/gates-due``, every 5 s). It runs
outside any tick and never holds a transaction across the network:

1. ``gates_claim``: the due gates of active rollouts, taken with ``FOR UPDATE SKIP LOCKED`` (workers
   running at once take different gates) and pushed ``CLAIM_LEASE`` ahead, in one short transaction;
2. ``gate_probe``: the question itself (rollout/gates/probe.py), on a few threads: no database;
3. ``gates_record``: the round's results stored on their rows in one transaction (a pass counts
   for two intervals; a failure adds one to the failures in a row, a pass resets them, an
   inconclusive answer leaves them) and the next evaluation due an interval later. A failure is
   also an event (``rollout.gate_failed``); when the failures in a row reach ``gateFailureLimit``
   a tick is asked for: the tick pauses the rollout (``gate_failed:<name>``), reading only the
   stored results. One commit per round, not per gate: under load a commit waits for the disk.

A claimed gate whose worker died is due again when its lease ends.

At create (and in the dry run) each Prometheus gate is asked once, before any transaction:
``gates_first_look``. A query Prometheus refuses (400 ``bad_data``) refuses the create (400
``invalid_gate`` with Prometheus' own error); any other answer, an unreachable Prometheus included, is
the gate's first result (``rollout/gates/verdicts.py`` ``gates_create``), counting no failure.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from rollout.controller.events import GateFailed, event_record
from rollout.controller.tick_requests import rollout_request_tick
from rollout.gates.probe import INCONCLUSIVE, MAX_DETAIL, Outcome, http_probe, prometheus_probe
from rollout.gates.spec import (
    FRESH_INTERVALS,
    PROMETHEUS,
    GateOptions,
    GateSpec,
    allow_private,
    prometheus_url,
    url_allow,
)
from rollout.models import Rollout, RolloutGate

log = structlog.get_logger("rollout")

State = RolloutGate.State
#: Gates asked at once by one worker (threads waiting on the network: a hanging Prometheus holds each for 5 s).
PROBE_THREADS = 64
#: Gates claimed per round: a round takes at most about two timeouts.
CLAIM_BATCH = 2 * PROBE_THREADS
#: A claimed gate is the claimer's this long; then another worker may ask it.
CLAIM_LEASE = timedelta(seconds=60)
#: One run of the task claims new rounds for this long at most.
RUN_SECONDS = 20.0


@dataclass(frozen=True)
class Claimed:
    """What asking one gate takes, read under the claim."""

    id: int
    rollout_id: str
    name: str
    kind: str
    query: str
    maximum: float | None
    url: str


def _first_probe(spec: GateSpec) -> Outcome | None:
    base = prometheus_url()
    if spec.kind != PROMETHEUS or base is None:  # HTTP gates are first asked by the evaluation
        return None
    return prometheus_probe(base, spec.query, maximum=spec.maximum or 0.0)


def gates_first_look(*, options: GateOptions) -> list[Outcome | None]:
    """Ask each Prometheus gate once, at once (the network: call it outside any transaction); None for the
    others. Raises InvalidInput ``invalid_gate`` naming the first gate whose query Prometheus refused."""
    prometheus_gates = [spec for spec in options.gates if spec.kind == PROMETHEUS]
    if not prometheus_gates:
        return [None for _ in options.gates]
    with ThreadPoolExecutor(max_workers=len(prometheus_gates), thread_name_prefix="gate-first") as threads:
        outcomes = list(threads.map(_first_probe, options.gates))
    for spec, outcome in zip(options.gates, outcomes, strict=True):
        if outcome is not None and outcome.refused is not None:
            raise InvalidInput(
                f"Gate {spec.name}: Prometheus refused the query: {outcome.refused}",
                code="invalid_gate",
                gate=spec.name,
            )
    return outcomes


def gates_claim(*, now: datetime, limit: int = CLAIM_BATCH) -> list[Claimed]:
    """Take up to ``limit`` due gates of active rollouts for one evaluation each (skip_locked)."""
    with transaction.atomic():
        rows = list(
            RolloutGate.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(due_at__lte=now, rollout__state=Rollout.State.ACTIVE)
            .order_by("due_at")
            .values_list("id", "rollout_id", "name", "kind", "query", "maximum", "url")[:limit]
        )
        if not rows:
            return []
        RolloutGate.objects.filter(id__in=[row[0] for row in rows]).update(due_at=now + CLAIM_LEASE)
    return [
        Claimed(id=pk, rollout_id=str(rollout_id), name=name, kind=kind, query=query, maximum=maximum, url=url)
        for pk, rollout_id, name, kind, query, maximum, url in rows
    ]


def gate_probe(claimed: Claimed) -> Outcome:
    """Ask one gate (the network; no database). Never raises."""
    try:
        if claimed.kind == RolloutGate.Kind.HTTP:
            if not any(claimed.url.startswith(prefix) for prefix in url_allow()):
                # The allowlist changed since the create: never call what it no longer admits.
                return Outcome(state=INCONCLUSIVE, value=None, detail="the URL is not in ROLLOUT_GATE_URL_ALLOW")
            return http_probe(claimed.url, allow_private=allow_private())
        base = prometheus_url()
        if base is None:
            return Outcome(state=INCONCLUSIVE, value=None, detail="ROLLOUT_PROMETHEUS_URL is not set")
        return prometheus_probe(base, claimed.query, maximum=claimed.maximum or 0.0)
    except Exception as exc:  # a probe never raises; this is the belt to its braces
        log.exception("rollout.gate_probe_failed", gate=claimed.name, rollout=claimed.rollout_id)
        return Outcome(state=INCONCLUSIVE, value=None, detail=f"error: {type(exc).__name__}")


def gates_record(*, results: list[tuple[int, Outcome]], now: datetime) -> list[RolloutGate]:
    """Store a round's results in one transaction (rows locked in id order); then each failure's event, and at
    the limit a tick (see above). Returns the gates recorded (a gate deleted meanwhile is dropped)."""
    outcomes = dict(results)
    with transaction.atomic():
        gates = list(
            RolloutGate.objects.select_for_update(of=("self",))
            .select_related("rollout")
            .filter(pk__in=list(outcomes))
            .order_by("id")
        )
        for gate in gates:
            _apply(gate, outcomes[gate.id], now=now)
        RolloutGate.objects.bulk_update(
            gates, ["state", "value", "detail", "at", "fresh_until", "consecutive_failures", "due_at"]
        )
    for gate in gates:
        log.info("rollout.gate", rollout=str(gate.rollout_id), gate=gate.name, state=gate.state, value=gate.value)
        if gate.state == State.FAIL:
            _failure_recorded(gate=gate, now=now)
    return gates


def gate_record(*, gate_id: int, outcome: Outcome, now: datetime) -> RolloutGate | None:
    """Store one evaluation's result (``gates_record`` of one)."""
    recorded = gates_record(results=[(gate_id, outcome)], now=now)
    return recorded[0] if recorded else None


def _apply(gate: RolloutGate, outcome: Outcome, *, now: datetime) -> None:
    """The result on the row: a pass counts for two intervals, failures in a row counted, due an interval later."""
    interval = timedelta(seconds=gate.rollout.gate_interval_seconds)
    gate.state = outcome.state
    gate.value = outcome.value
    gate.detail = (outcome.detail or "")[:MAX_DETAIL]
    gate.at = now
    gate.fresh_until = now + FRESH_INTERVALS * interval if outcome.state == State.PASS else None
    if outcome.state == State.FAIL:
        gate.consecutive_failures += 1
    elif outcome.state == State.PASS:
        gate.consecutive_failures = 0
    gate.due_at = now + interval


def _failure_recorded(*, gate: RolloutGate, now: datetime) -> None:
    """The failure's event, in a transaction of its own (the gate's row lock is released: no lock cycle with
    a resume, which locks the rollout and then its gates)."""
    with transaction.atomic():
        rollout = Rollout.objects.select_related("release").filter(pk=gate.rollout_id).first()
        if rollout is None or rollout.state != Rollout.State.ACTIVE:
            return
        reached = gate.consecutive_failures >= rollout.gate_failure_limit
        failed = GateFailed(
            gate=gate.name,
            value=gate.value,
            consecutive_failures=gate.consecutive_failures,
            failure_limit=rollout.gate_failure_limit,
            detail=gate.detail,
            action=gate.on_failure if reached else None,
        )
        event_record(rollout=rollout, payload=failed, at=now)
        if reached:
            rollout_request_tick(rollout_id=rollout.id)  # the tick pauses or aborts it (onFailure), at once


def gates_evaluate_due(*, run_seconds: float = RUN_SECONDS) -> int:
    """``rollout/gates-due``: evaluate due gates, round after round, for at most ``run_seconds``; how many."""
    started = time.monotonic()
    evaluated = 0
    with ThreadPoolExecutor(max_workers=PROBE_THREADS, thread_name_prefix="gate-probe") as threads:
        while time.monotonic() - started < run_seconds:
            claimed = gates_claim(now=timezone.now())
            if not claimed:
                break
            outcomes = list(threads.map(gate_probe, claimed))
            results = [(gate.id, outcome) for gate, outcome in zip(claimed, outcomes, strict=True)]
            gates_record(results=results, now=timezone.now())
            evaluated += len(claimed)
    return evaluated
