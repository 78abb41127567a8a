"""A rollout's gates as asked for (docs/controller.md#gates): the create's options and their one validation.

No model here (``plan.rollout_spec`` calls it, and plan.py is read before Django is set up): the
rows, and what the tick and the blockers read, are rollout/gates/verdicts.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.errors import InvalidInput
from rollout.webhooks.safety import UnsafeURL, parse_url, resolve_checked

PROMETHEUS = "prometheus"
HTTP = "http"
MAX_GATES = 8
MAX_QUERY_BYTES = 4096
DEFAULT_INTERVAL_SECONDS = 30
INTERVAL_RANGE = (5, 3600)
DEFAULT_FAILURE_LIMIT = 3
FAILURE_LIMIT_RANGE = (1, 100)
#: A name: 1 to 63 characters, none of them a control character (NUL included: PostgreSQL stores no NUL).
NAME = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,63}")
#: A pass counts this many intervals after it was taken.
FRESH_INTERVALS = 2
#: What reaching ``gateFailureLimit`` does (``onFailure``, RolloutGate.OnFailure's values); the first is the default.
ON_FAILURE = ("pause", "abort", "abort_rollback")


@dataclass(frozen=True)
class GateSpec:
    """One gate as asked for: a Prometheus query and its maximum, or an HTTP URL."""

    name: str
    kind: str  # PROMETHEUS or HTTP (RolloutGate.Kind's values)
    query: str = ""
    maximum: float | None = None
    url: str = ""
    on_failure: str = ON_FAILURE[0]

    def definition(self) -> dict[str, Any]:
        """The gate in the create's shape (``onFailure`` named when it is not the default)."""
        acts = {} if self.on_failure == ON_FAILURE[0] else {"onFailure": self.on_failure}
        if self.kind == PROMETHEUS:
            return {"name": self.name, "prometheus": {"query": self.query, "max": self.maximum}, **acts}
        return {"name": self.name, "http": {"url": self.url}, **acts}


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
        raise _invalid(f"gates[{index}].name must be 1 to 63 characters, none of them a control character.")
    kinds = [key for key in ("prometheus", "http") if key in raw]
    unknown = sorted(set(raw) - {"name", "prometheus", "http", "onFailure"})
    if unknown or len(kinds) != 1:
        raise _invalid(f"Gate {name} must have a name and exactly one of prometheus or http.", gate=name)
    on_failure = raw.get("onFailure", ON_FAILURE[0])
    if on_failure not in ON_FAILURE:
        raise _invalid(f"Gate {name}: onFailure is one of {', '.join(ON_FAILURE)}.", gate=name)
    body = raw[kinds[0]]
    if kinds[0] == "prometheus":
        if not isinstance(body, dict) or set(body) != {"query", "max"}:
            raise _invalid(f'Gate {name}: prometheus is {{"query", "max"}}.', gate=name)
        query, maximum = body["query"], body["max"]
        if not isinstance(query, str) or not query.strip() or len(query.encode("utf-8", "replace")) > MAX_QUERY_BYTES:
            raise _invalid(f"Gate {name}: the query is 1 to {MAX_QUERY_BYTES} bytes of PromQL.", gate=name)
        if "\x00" in query:
            raise _invalid(f"Gate {name}: the query holds a NUL character.", gate=name)
        if isinstance(maximum, bool) or not isinstance(maximum, int | float) or not math.isfinite(maximum):
            raise _invalid(f"Gate {name}: max must be a number.", gate=name)
        if prometheus_url() is None:
            raise _invalid("Prometheus gates need ROLLOUT_PROMETHEUS_URL, which is not set.", gate=name)
        return GateSpec(name=name, kind=PROMETHEUS, query=query, maximum=float(maximum), on_failure=on_failure)
    if not isinstance(body, dict) or set(body) != {"url"}:
        raise _invalid(f'Gate {name}: http is {{"url"}}.', gate=name)
    return GateSpec(name=name, kind=HTTP, url=gate_url_check(body["url"], name=name), on_failure=on_failure)


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
