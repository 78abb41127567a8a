"""Gates (docs/controller.md#gates): their definitions at create, and what the tick and the blockers read.

A gate is a health signal a rollout waits on: a Prometheus query whose every sample must stay at
most ``max``, or an HTTP URL that must answer 2xx. The evaluation task asks them
(rollout/services/gate_checks.py) and stores each one's latest result; everything here reads
those stored results only, never the network:

- the tick: ``with_gate_verdicts`` annotates the query that locks the rollout, so a rollout with 8
  gates costs its tick no query more than one without (``gates_holding``: some gate's latest
  result is not a pass taken within two intervals; ``gate_failed``: the first gate whose failures
  in a row reached ``gateFailureLimit``);
- the blockers: ``gates_holding_for`` (one query for many rollouts);
- the API and the admin: ``gates_of``, ``gate_json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from core.errors import InvalidInput
from rollout.models import Rollout, RolloutGate
from rollout.webhooks.safety import UnsafeURL, parse_url, resolve_checked

MAX_GATES = 8
MAX_QUERY_BYTES = 4096
DEFAULT_INTERVAL_SECONDS = 30
INTERVAL_RANGE = (5, 3600)
DEFAULT_FAILURE_LIMIT = 3
FAILURE_LIMIT_RANGE = (1, 100)
#: A name: 1 to 63 of [A-Za-z0-9-_.], beginning and ending with a letter or digit (as a label's name).
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
#: A pass counts this many intervals after it was taken.
FRESH_INTERVALS = 2


@dataclass(frozen=True)
class GateSpec:
    """One gate as asked for: a Prometheus query and its maximum, or an HTTP URL."""

    name: str
    kind: str  # a RolloutGate.Kind
    query: str = ""
    maximum: float | None = None
    url: str = ""

    def definition(self) -> dict[str, Any]:
        """The gate in the create's shape."""
        if self.kind == RolloutGate.Kind.PROMETHEUS:
            return {"name": self.name, "prometheus": {"query": self.query, "max": self.maximum}}
        return {"name": self.name, "http": {"url": self.url}}


@dataclass(frozen=True)
class GateOptions:
    """A rollout's gates, checked (docs/api.md#rollouts): none by default."""

    gates: tuple[GateSpec, ...] = ()
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS
    failure_limit: int = DEFAULT_FAILURE_LIMIT


def _invalid(detail: str, **fields: Any) -> InvalidInput:
    return InvalidInput(detail, code="invalid_gate", **fields)


def prometheus_url() -> str | None:
    return getattr(settings, "ROLLOUT_PROMETHEUS_URL", None) or None


def url_allow() -> tuple[str, ...]:
    return tuple(getattr(settings, "ROLLOUT_GATE_URL_ALLOW", None) or ())


def allow_private() -> bool:
    """The webhooks' switch (ROLLOUT_WEBHOOKS_ALLOW_HTTP) admits http:// and private addresses for gates too."""
    return bool(getattr(settings, "ROLLOUT_WEBHOOKS_ALLOW_HTTP", False))


def _integer(value: object, name: str, default: int, bounds: tuple[int, int]) -> int:
    if value is None:
        return default
    low, high = bounds
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer from {low} to {high}.", code="invalid_input", field=name)
    return value


def gate_url_check(url: object, *, name: str) -> str:
    """An HTTP gate's URL: within ``ROLLOUT_GATE_URL_ALLOW``, and the webhooks' rules (shape, every address
    its host resolves to now); raises InvalidInput ``invalid_gate``."""
    allowed = url_allow()
    if not isinstance(url, str):
        raise _invalid(f"Gate {name}: http.url must be a string.", gate=name)
    if not allowed:
        raise _invalid("HTTP gates are not allowed here (ROLLOUT_GATE_URL_ALLOW is not set).", gate=name)
    if not any(url.startswith(prefix) for prefix in allowed):
        raise _invalid(f"Gate {name}: the URL does not begin with an allowed prefix.", gate=name)
    try:
        target = parse_url(url, allow_http=allow_private())
        resolve_checked(target.host, target.port, allow_private=allow_private())
    except UnsafeURL as exc:
        raise _invalid(f"Gate {name}: {exc}", gate=name) from exc
    return url


def _gate(raw: object, index: int) -> GateSpec:
    if not isinstance(raw, dict):
        raise _invalid(f"gates[{index}] must be an object.")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _invalid(
            f"gates[{index}].name must be 1 to 63 characters of letters, digits, '-', '_' and '.', beginning and "
            "ending with a letter or digit."
        )
    kinds = [key for key in ("prometheus", "http") if key in raw]
    unknown = sorted(set(raw) - {"name", "prometheus", "http"})
    if unknown or len(kinds) != 1:
        raise _invalid(f"Gate {name} must have a name and exactly one of prometheus or http.", gate=name)
    body = raw[kinds[0]]
    if kinds[0] == "prometheus":
        if not isinstance(body, dict) or set(body) != {"query", "max"}:
            raise _invalid(f'Gate {name}: prometheus is {{"query", "max"}}.', gate=name)
        query, maximum = body["query"], body["max"]
        if not isinstance(query, str) or not query.strip() or len(query.encode("utf-8", "replace")) > MAX_QUERY_BYTES:
            raise _invalid(f"Gate {name}: the query is 1 to {MAX_QUERY_BYTES} bytes of PromQL.", gate=name)
        if isinstance(maximum, bool) or not isinstance(maximum, int | float) or not math.isfinite(maximum):
            raise _invalid(f"Gate {name}: max must be a number.", gate=name)
        if prometheus_url() is None:
            raise _invalid("Prometheus gates need ROLLOUT_PROMETHEUS_URL, which is not set.", gate=name)
        return GateSpec(name=name, kind=RolloutGate.Kind.PROMETHEUS, query=query, maximum=float(maximum))
    if not isinstance(body, dict) or set(body) != {"url"}:
        raise _invalid(f'Gate {name}: http is {{"url"}}.', gate=name)
    return GateSpec(name=name, kind=RolloutGate.Kind.HTTP, url=gate_url_check(body["url"], name=name))


def gates_validate(
    *, gates: object = None, interval_seconds: object = None, failure_limit: object = None
) -> GateOptions:
    """``gates``, ``gateIntervalSeconds``, ``gateFailureLimit`` checked; raises InvalidInput (400)."""
    interval = _integer(interval_seconds, "gateIntervalSeconds", DEFAULT_INTERVAL_SECONDS, INTERVAL_RANGE)
    limit = _integer(failure_limit, "gateFailureLimit", DEFAULT_FAILURE_LIMIT, FAILURE_LIMIT_RANGE)
    if gates is None:
        return GateOptions(interval_seconds=interval, failure_limit=limit)
    if not isinstance(gates, list | tuple):
        raise _invalid(f"gates must be a list of at most {MAX_GATES} gates.")
    if len(gates) > MAX_GATES:
        raise _invalid(f"At most {MAX_GATES} gates a rollout ({len(gates)} given).")
    specs = tuple(_gate(raw, index) for index, raw in enumerate(gates))
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise _invalid("Each gate's name must be unique in the rollout.")
    return GateOptions(gates=specs, interval_seconds=interval, failure_limit=limit)


def gates_create(*, rollout: Rollout, options: GateOptions, now: datetime) -> None:
    """The rollout's gate rows, in the create's transaction: pending, due at once."""
    RolloutGate.objects.bulk_create(
        RolloutGate(
            rollout=rollout,
            position=position,
            name=spec.name,
            kind=spec.kind,
            query=spec.query,
            maximum=spec.maximum,
            url=spec.url,
            due_at=now,
        )
        for position, spec in enumerate(options.gates)
    )


def gates_counts_clear(*, rollout: Rollout, now: datetime) -> None:
    """On resume: every gate's failures in a row start again from 0, and each is asked again at once."""
    RolloutGate.objects.filter(rollout=rollout).update(consecutive_failures=0, due_at=now)


# --- reads -------------------------------------------------------------------------------------


def _not_fresh(now: datetime) -> Q:
    return Q(fresh_until__isnull=True) | Q(fresh_until__lt=now)


def with_gate_verdicts(queryset: QuerySet[Rollout], *, now: datetime) -> QuerySet[Rollout]:
    """Rollouts annotated (in the same query) with ``gates_holding`` and ``gate_failed`` (a name or None)."""
    gates = RolloutGate.objects.filter(rollout=OuterRef("pk"))
    failed = gates.filter(consecutive_failures__gte=OuterRef("gate_failure_limit")).order_by("position")
    return queryset.annotate(
        gates_holding=Exists(gates.filter(_not_fresh(now))),
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
    }
