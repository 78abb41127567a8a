"""Read-only fields of a rollout's page, as an operator reads them (display only; rollout/admin/rollouts.py)."""

from __future__ import annotations

from django.contrib import admin

from fleet.interface import budget_percent
from rollout.admin.display import seconds_text, when
from rollout.models import Rollout


class RolloutDurationsMixin:
    """The plan's durations in words, the seconds the API takes beside them (``7 days (605015 s)``); its pools,
    ratio and waves as read; when its next wave starts."""

    @admin.display(description="next wave at")
    def next_wave(self, rollout: Rollout) -> str:
        """Only while the rollout may still start a wave: never a stale time after an abort or completion."""
        if rollout.state not in Rollout.ACTIVE_STATES or rollout.next_wave_at is None:
            return "-"
        return when(rollout.next_wave_at)

    @admin.display(description="pools")
    def pool_names(self, rollout: Rollout) -> str:
        return ", ".join(pool.name for pool in rollout.pools.order_by("name"))

    @admin.display(description="max failure ratio")
    def failure_ratio_percent(self, rollout: Rollout) -> str:
        """In percent, as the budgets read (the API keeps the fraction)."""
        return budget_percent(rollout.max_failure_ratio)

    @admin.display(description="waves (cumulative %)")
    def waves_requested(self, rollout: Rollout) -> str:
        return ", ".join(str(percent) for percent in rollout.waves)

    @admin.display(description="soak between waves")
    def soak(self, rollout: Rollout) -> str:
        return seconds_text(rollout.soak_seconds)

    @admin.display(description="upgrade timeout")
    def upgrade_timeout(self, rollout: Rollout) -> str:
        return seconds_text(rollout.upgrade_timeout_seconds)

    @admin.display(description="min ready")
    def min_ready(self, rollout: Rollout) -> str:
        return seconds_text(rollout.min_ready_seconds)
