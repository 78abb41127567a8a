"""Read-only fields of a rollout's page, as an operator reads them (display only; rollout/admin/rollouts.py)."""

from __future__ import annotations

from django.contrib import admin

from rollout.admin.display import seconds_text
from rollout.models import Rollout


class RolloutDurationsMixin:
    """The plan's durations in words, the seconds the API takes beside them (``7 days (605015 s)``)."""

    @admin.display(description="soak between waves")
    def soak(self, rollout: Rollout) -> str:
        return seconds_text(rollout.soak_seconds)

    @admin.display(description="upgrade timeout")
    def upgrade_timeout(self, rollout: Rollout) -> str:
        return seconds_text(rollout.upgrade_timeout_seconds)

    @admin.display(description="min ready")
    def min_ready(self, rollout: Rollout) -> str:
        return seconds_text(rollout.min_ready_seconds)
