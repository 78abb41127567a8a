"""When the controller last ran, for the health endpoint (docs/operations.md#health)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ControllerBeat(models.Model):
    """One row: when the periodic tick (``rollout/all``) last ran, for ``GET /api/compute/health``.

    Written by each periodic tick (an upsert), whether or not a rollout runs: a worker and a beat
    that run show here even on an idle installation (docs/operations.md#health).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_tick_at = models.DateTimeField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="controller_beat_one_row")]

    def __str__(self) -> str:
        return f"controller ticked at {self.last_tick_at:%Y-%m-%d %H:%M:%S}"
