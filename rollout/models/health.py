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


class TickScheduleWritten(models.Model):
    """One row: the interval (seconds) the code last wrote to the ``rollout/all`` periodic task
    (rollout/schedules.py ``periodic_tick_ensure``).

    A stored interval equal to it is the code's, and ``migrate`` (or a starting beat) brings it to
    ``ROLLOUT_EVERY``; a stored interval that differs was changed by a person in the admin, and wins
    (docs/operations.md#the-controllers-interval).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    every = models.PositiveIntegerField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="tick_schedule_written_one_row")]

    def __str__(self) -> str:
        return f"rollout/all written every {self.every} s"
