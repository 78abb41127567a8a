"""The failure ratio's rule (docs/controller.md#the-tick, Judge): a wave's counts, and whether they pause it.

The tick's decision judges the current wave with these (``decide.decide``), and the plan predicts the pause it
applies (rollout/controller/plan.py); resume reads the failures an operator accepts (``wave_failures``).
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Count

from rollout.models import NodeUpgrade, Rollout

State = NodeUpgrade.State


def wave_counts(*, rollout: Rollout, wave: int) -> dict[str, int]:
    rows = NodeUpgrade.objects.filter(rollout=rollout, wave=wave).values("state").annotate(n=Count("id")).order_by()
    counts = dict.fromkeys(State.values, 0)
    counts.update({row["state"]: row["n"] for row in rows})
    return counts


def wave_failures(rollout: Rollout) -> int:
    return wave_counts(rollout=rollout, wave=rollout.current_wave)[State.FAILED]


def failure_ratio_judged(*, rollout: Rollout, counts: dict[str, int]) -> bool:
    """The ratio is judged once ``failureRatioMinSettled`` of the wave's nodes settled
    (succeeded + failed), or once all of them have (nothing pending or in flight)."""
    settled = counts[State.FAILED] + counts[State.SUCCEEDED]
    wave_over = not counts[State.PENDING] and not counts[State.IN_FLIGHT]
    return settled >= rollout.failure_ratio_min_settled or wave_over


def failure_ratio_exceeded(*, rollout: Rollout, counts: dict[str, int]) -> bool:
    """The rule: the current wave's failed / (succeeded + failed) exceeds maxFailureRatio.

    Exactly "exceeds": equality does not pause. Exact arithmetic (Decimal).
    Failures an operator accepted by resuming do not count again; a new one does.
    Judged only once the wave's minimum sample settled (``failure_ratio_judged``).
    """
    failed, succeeded = counts[State.FAILED], counts[State.SUCCEEDED]
    if failed <= rollout.acknowledged_failures or failed + succeeded == 0:
        return False
    if not failure_ratio_judged(rollout=rollout, counts=counts):
        return False
    return Decimal(failed) > rollout.max_failure_ratio * (failed + succeeded)
