"""What a rollout is asked to be and what it would do: its spec, options, seeded shuffle and wave split.

Pure functions and the dataclasses of the service boundary: the API's
serializers and the admin's form build a ``RolloutSpec`` with ``rollout_spec``
(the one validation of the options); ``rollout_plan`` answers a ``RolloutPlan``.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from operator import attrgetter
from typing import TYPE_CHECKING
from uuid import UUID

from django.utils import timezone

from core.errors import InvalidInput
from rollout.gates.probe import Outcome
from rollout.gates.spec import GateOptions, gates_validate

if TYPE_CHECKING:
    from fleet.interface import Selector

DEFAULT_WAVES = (1, 10, 50, 100)
DEFAULT_MAX_FAILURE_RATIO = Decimal("0.1")
DEFAULT_SOAK_SECONDS = 300
DEFAULT_UPGRADE_TIMEOUT_SECONDS = 600
DEFAULT_FAILURE_RATIO_MIN_SETTLED = 0
MAX_WAVES = 20
MAX_POOL_IDS = 1000  # far above any real fleet's pools; bounds the query and the error bodies
WAVE_QUANTUM = Decimal("0.00001")  # RolloutWave.percent has 5 decimal places
MAX_SECONDS = 30 * 24 * 3600  # a month: anything longer is a typo
MAX_MIN_READY_SECONDS = 86400  # docs/controller.md#readiness-before-success-minreadyseconds


@dataclass(frozen=True)
class RolloutOptions:
    """Validated options of a rollout (docs/api.md#rollouts)."""

    waves: tuple[int | float, ...]
    max_failure_ratio: Decimal
    soak_seconds: int
    upgrade_timeout_seconds: int
    min_ready_seconds: int = 0
    #: Judge the wave's failure ratio once this many of its nodes settled, or all did (docs/controller.md#the-tick).
    failure_ratio_min_settled: int = DEFAULT_FAILURE_RATIO_MIN_SETTLED


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _exact_decimal(value: int | float) -> Decimal:
    """The number as written in JSON: a float's shortest repr (0.1 is 0.1, not its binary expansion)."""
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _seconds(value: object, name: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_SECONDS:
        raise InvalidInput(
            f"{name} must be an integer from {minimum} to {MAX_SECONDS}.", code="invalid_input", field=name
        )
    return value


def options_validate(
    *,
    waves: object = None,
    max_failure_ratio: object = None,
    soak_seconds: object = None,
    upgrade_timeout_seconds: object = None,
    min_ready_seconds: object = None,
    failure_ratio_min_settled: object = None,
) -> RolloutOptions:
    """Apply defaults and check every option; raises InvalidInput (400) naming the field."""
    waves = list(DEFAULT_WAVES) if waves is None else waves
    if not isinstance(waves, list) or not waves or len(waves) > MAX_WAVES:
        raise InvalidInput(f"waves must be a list of 1 to {MAX_WAVES} percentages.", code="invalid_waves")
    if not all(_is_number(p) and 0 < p <= 100 for p in waves):
        raise InvalidInput("Each wave is a cumulative percentage in (0, 100].", code="invalid_waves")
    # Stored with 5 decimals: more would be rounded (1e-300 to 0, or two waves merged), so refuse them.
    if not all(_exact_decimal(p) == _exact_decimal(p).quantize(WAVE_QUANTUM) for p in waves):
        raise InvalidInput("Each wave percentage has at most 5 decimals.", code="invalid_waves")
    if any(b <= a for a, b in itertools.pairwise(waves)):
        raise InvalidInput("waves must be strictly increasing (they are cumulative).", code="invalid_waves")
    if waves[-1] != 100:
        raise InvalidInput("The last wave must be exactly 100.", code="invalid_waves")

    ratio_raw = DEFAULT_MAX_FAILURE_RATIO if max_failure_ratio is None else max_failure_ratio
    if isinstance(ratio_raw, bool) or not isinstance(ratio_raw, int | float | Decimal):
        raise InvalidInput("maxFailureRatio must be a number in [0, 1].", code="invalid_input", field="maxFailureRatio")
    try:
        ratio = Decimal(str(ratio_raw))
    except InvalidOperation as exc:
        raise InvalidInput("maxFailureRatio must be a number in [0, 1].", code="invalid_input") from exc
    if not ratio.is_finite() or not 0 <= ratio <= 1 or ratio != ratio.quantize(Decimal("0.00001")):
        raise InvalidInput(
            "maxFailureRatio must be a number in [0, 1] with at most 5 decimals.",
            code="invalid_input",
            field="maxFailureRatio",
        )
    return RolloutOptions(
        waves=tuple(waves),
        max_failure_ratio=ratio,
        soak_seconds=_seconds(DEFAULT_SOAK_SECONDS if soak_seconds is None else soak_seconds, "soakSeconds", 0),
        upgrade_timeout_seconds=_seconds(
            DEFAULT_UPGRADE_TIMEOUT_SECONDS if upgrade_timeout_seconds is None else upgrade_timeout_seconds,
            "upgradeTimeoutSeconds",
            1,
        ),
        min_ready_seconds=_min_ready_seconds(min_ready_seconds),
        failure_ratio_min_settled=_min_settled(failure_ratio_min_settled),
    )


def _min_ready_seconds(value: object) -> int:
    """``minReadySeconds``: a JSON integer from 0 to 86400, default 0.

    See docs/controller.md#readiness-before-success-minreadyseconds."""
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_MIN_READY_SECONDS:
        raise InvalidInput(
            f"minReadySeconds must be an integer from 0 to {MAX_MIN_READY_SECONDS}.",
            code="invalid_input",
            field="minReadySeconds",
        )
    return value


def _min_settled(value: object) -> int:
    """``failureRatioMinSettled``: a JSON integer >= 0 (no bool, no 3.0); None is the default."""
    if value is None:
        return DEFAULT_FAILURE_RATIO_MIN_SETTLED
    # The database column is a PostgreSQL integer: anything larger is refused here, not by a 500.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2**31 - 1:
        raise InvalidInput(
            "failureRatioMinSettled must be an integer >= 0.", code="invalid_input", field="failureRatioMinSettled"
        )
    return value


#: How far in the past a ``startAt`` may be (a clock a little behind, a request a little slow).
START_AT_SLACK = timedelta(minutes=1)


@dataclass(frozen=True)
class Schedule:
    """When a rollout starts and must stop (docs/controller.md#schedules); None: at once, no deadline."""

    start_at: datetime | None = None
    end_by: datetime | None = None
    end_behavior: str | None = None  # a Rollout.EndBehavior value; "pause" when endBy is given without it


#: RFC 3339's date-time (section 5.6): a full date, "T", a full time with seconds, an optional fraction, and an
#: offset ("Z" or ±hh:mm). ``datetime.fromisoformat`` alone takes ISO 8601's other forms too (week dates, basic
#: format, no seconds, an offset without its colon).
RFC3339_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def schedule_time(value: object, name: str) -> datetime | None:
    """An RFC 3339 time with its offset, in years 1 to 9999 in UTC, or 400 ``invalid_schedule`` naming the field."""
    if value is None:
        return None
    parsed = None
    if isinstance(value, str) and RFC3339_TIME.fullmatch(value):
        try:
            # Python takes at most 6 fraction digits: a finer fraction is cut to microseconds.
            text = re.sub(r"(\.\d{6})\d+", r"\1", value.upper())
            parsed = datetime.fromisoformat(text).astimezone(UTC)  # out of range in UTC (9999-12-31T23:00-01:00)
        except (ValueError, OverflowError):
            parsed = None
    if parsed is None:
        raise InvalidInput(
            f"{name} must be an RFC 3339 time with an offset, e.g. 2026-06-01T09:00:00Z.",
            code="invalid_schedule",
            field=name,
        )
    return parsed


def schedule_validate(*, start_at: object, end_by: object, end_behavior: object, now: datetime) -> Schedule:
    """``startAt`` not more than a minute past, ``endBy`` after it and after now; 400 ``invalid_schedule``.
    ``endBehavior`` without ``endBy`` is 400 ``invalid``."""
    start = schedule_time(start_at, "startAt")
    end = schedule_time(end_by, "endBy")
    if start is not None and start < now - START_AT_SLACK:
        raise InvalidInput("startAt is in the past.", code="invalid_schedule", field="startAt")
    if end is not None and (end <= now or (start is not None and end <= start)):
        raise InvalidInput("endBy must be after now and after startAt.", code="invalid_schedule", field="endBy")
    behaviors = ("pause", "abort", "abort_rollback")
    if end_behavior is not None and end_behavior not in behaviors:
        raise InvalidInput(
            f"endBehavior is one of {', '.join(behaviors)}.", code="invalid_schedule", field="endBehavior"
        )
    if end is None and end_behavior is not None:
        # Nothing would ever apply it: refused rather than stored (docs/controller.md#schedules).
        raise InvalidInput(
            "endBehavior needs endBy: without a deadline there is nothing to end.", code="invalid", field="endBehavior"
        )
    if end is not None and end_behavior is None:
        end_behavior = "pause"
    return Schedule(start_at=start, end_by=end, end_behavior=end_behavior if isinstance(end_behavior, str) else None)


@dataclass(frozen=True)
class RolloutSpec:
    """A rollout as asked for (docs/api.md#rollouts), its options checked; pools and release are checked at create."""

    version: str
    pool_ids: tuple[str, ...] | None  # None: all the tenant's pools
    options: RolloutOptions
    gates: GateOptions = field(default_factory=GateOptions)
    #: A label selector (docs/api.md#rollouts-to-a-selection), parsed; None: every node of the pools.
    selector: Selector | None = None
    selector_text: str | None = None  # as given: what the representation shows
    schedule: Schedule = field(default_factory=Schedule)
    #: The id of the rollout this one supersedes, as given (docs/controller.md#undoing-a-bad-release); None: none.
    supersedes: str | None = None


def _selector(text: object) -> Selector:
    """The parsed selector (400 ``invalid_selector``); imported here: this module loads before Django's apps."""
    from fleet.interface import selector_validate

    return selector_validate(text)


def rollout_spec(
    *,
    version: object,
    pool_ids: object = None,
    waves: object = None,
    max_failure_ratio: object = None,
    soak_seconds: object = None,
    upgrade_timeout_seconds: object = None,
    min_ready_seconds: object = None,
    failure_ratio_min_settled: object = None,
    gates: object = None,
    gate_interval_seconds: object = None,
    gate_failure_limit: object = None,
    selector: object = None,
    start_at: object = None,
    end_by: object = None,
    end_behavior: object = None,
    supersedes: object = None,
) -> RolloutSpec:
    """Check what can be checked without the database; raises InvalidInput (400) naming the field."""
    if supersedes is not None and not isinstance(supersedes, str):
        raise InvalidInput("supersedes must be a rollout id.", code="invalid_input", field="supersedes")
    options = options_validate(
        waves=waves,
        max_failure_ratio=max_failure_ratio,
        soak_seconds=soak_seconds,
        upgrade_timeout_seconds=upgrade_timeout_seconds,
        min_ready_seconds=min_ready_seconds,
        failure_ratio_min_settled=failure_ratio_min_settled,
    )
    if not isinstance(version, str) or not version:
        raise InvalidInput("version is required.", code="invalid_input", field="version")
    if pool_ids is not None:
        if not isinstance(pool_ids, list | tuple) or not pool_ids or len(pool_ids) > MAX_POOL_IDS:
            raise InvalidInput(
                f"poolIds must be a list of 1 to {MAX_POOL_IDS} ids.", code="invalid_input", field="poolIds"
            )
        pool_ids = tuple(str(pool_id) for pool_id in pool_ids)
    checked_gates = gates_validate(
        gates=gates, interval_seconds=gate_interval_seconds, failure_limit=gate_failure_limit
    )
    return RolloutSpec(
        version=version,
        pool_ids=pool_ids,
        options=options,
        gates=checked_gates,
        selector=None if selector is None else _selector(selector),
        selector_text=selector if isinstance(selector, str) else None,
        schedule=schedule_validate(start_at=start_at, end_by=end_by, end_behavior=end_behavior, now=timezone.now()),
        supersedes=supersedes,
    )


@dataclass(frozen=True)
class WavePlan:
    index: int
    percent: int | float
    total: int
    pools: dict[str, int]  # nodes of this wave per pool id


@dataclass(frozen=True)
class PoolPlan:
    allowed: int  # ceil(disruptionBudget x nodes in the pool)
    in_use: int  # nodes of the pool disrupted now


@dataclass(frozen=True)
class RolloutPlan:
    """What a create would do (the dry run): nothing is written."""

    version: str
    pool_ids: list[str]
    selector: str | None
    nodes: int
    waves: list[WavePlan]
    budgets: dict[str, PoolPlan]
    options: RolloutOptions
    #: Worst case (every node takes the whole timeout, plus the soaks); None when a pool's budget is 0.
    estimated_seconds: int | None
    #: Nodes left out because they run a release of a higher sequence (docs/controller.md#create).
    excluded_newer: int = 0
    #: startAt, endBy and endBehavior as the create would store them (endBehavior "pause" when only endBy is given).
    schedule: Schedule = field(default_factory=Schedule)
    gates: GateOptions = field(default_factory=GateOptions)
    #: Each gate's first result as the create would store it (None: pending, an HTTP gate).
    gate_looks: tuple[Outcome | None, ...] = ()

    def planned_gates(self) -> list[dict[str, object]]:
        """The gates in the create's shape, each with the first result the create would store."""
        looks = self.gate_looks or (None,) * len(self.gates.gates)
        return [
            {
                **spec.definition(),
                "state": look.state if look is not None else "pending",
                "value": look.value if look is not None else None,
                "detail": look.detail if look is not None else None,
            }
            for spec, look in zip(self.gates.gates, looks, strict=True)
        ]


def shuffle(items: Sequence[UUID], *, seed: UUID) -> list[UUID]:
    """``items`` in an order shuffled by ``seed``: the same seed gives the same order.

    The input is sorted first so the order depends on the set of items and the
    seed only, never on how the database returned them. random.Random seeded
    with a str is stable across processes and Python versions (seed version 2).
    """
    ordered = sorted(items, key=attrgetter("int"))  # the UUIDs' order, without their slow __lt__
    random.Random(seed.hex).shuffle(ordered)  # noqa: S311 - an order, not a secret
    return ordered


def _ceil_share(percent: int | float, n: int) -> int:
    return math.ceil(Fraction(str(percent)) * n / 100)


def wave_bounds(waves: Sequence[int | float], n: int) -> list[tuple[int, int]]:
    """[start, end) positions of each requested wave: wave k holds ceil(p[k-1]·N/100) .. ceil(p[k]·N/100)."""
    bounds = []
    start = 0
    for percent in waves:
        end = _ceil_share(percent, n)
        bounds.append((start, end))
        start = end
    return bounds


@dataclass(frozen=True)
class PlannedWave:
    index: int
    percent: int | float
    start: int
    end: int

    @property
    def total(self) -> int:
        return self.end - self.start


def planned_waves(waves: Sequence[int | float], n: int) -> list[PlannedWave]:
    """The non-empty waves, renumbered from 0 (empty waves are skipped)."""
    non_empty = [(p, s, e) for p, (s, e) in zip(waves, wave_bounds(waves, n), strict=True) if e > s]
    return [PlannedWave(index=i, percent=p, start=s, end=e) for i, (p, s, e) in enumerate(non_empty)]
