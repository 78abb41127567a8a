"""A rollout's gates: each one's definition and its latest result (docs/controller.md#gates).

One row per gate, written at create. The evaluation task (rollout/controller/gate_evaluation.py) claims
the due rows (``due_at``), asks outside any transaction and records the result here; the tick and
the blockers read only these rows, never the network.

State: pending (never asked) -> pass | fail | inconclusive, each evaluation replacing the last.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class RolloutGate(models.Model):
    class Kind(models.TextChoices):
        PROMETHEUS = "prometheus", "Prometheus query"
        HTTP = "http", "HTTP GET"

    class OnFailure(models.TextChoices):
        """What reaching ``gateFailureLimit`` does to the rollout (docs/controller.md#gates)."""

        PAUSE = "pause", "pause"
        ABORT = "abort", "abort"
        ABORT_ROLLBACK = "abort_rollback", "abort with rollback"

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        PASS = "pass", "pass"
        FAIL = "fail", "fail"
        INCONCLUSIVE = "inconclusive", "inconclusive"

    id = models.BigAutoField(primary_key=True)
    rollout = models.ForeignKey("rollout.Rollout", on_delete=models.CASCADE, related_name="gates")
    position = models.PositiveSmallIntegerField(help_text="Its place in the list given at create.")
    name = models.CharField(max_length=63)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    query = models.TextField(blank=True, help_text="PromQL (a Prometheus gate).")
    maximum = models.FloatField(null=True, blank=True, help_text="Every sample must be at most this.")
    url = models.CharField(max_length=2000, blank=True, help_text="An HTTP gate's URL.")
    on_failure = models.CharField(max_length=16, choices=OnFailure.choices, default=OnFailure.PAUSE)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    value = models.FloatField(null=True, blank=True, help_text="The largest sample, or the HTTP status.")
    # Why (docs/api.md#rollouts): the provider's error text for inconclusive, a sentence for a fail, "" for a pass.
    detail = models.CharField(max_length=1000, blank=True)
    at = models.DateTimeField(null=True, blank=True, help_text="When the latest result was taken.")
    # A pass counts until then (two intervals after it was taken); null for any other state.
    fresh_until = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # When it is asked next; a claim pushes it past the evaluation's end.
    due_at = models.DateTimeField()

    class Meta:
        ordering = ["rollout", "position"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "name"], name="rollout_gate_name_unique"),
            models.UniqueConstraint(fields=["rollout", "position"], name="rollout_gate_position_unique"),
            models.CheckConstraint(
                condition=Q(state="pass", fresh_until__isnull=False) | (~Q(state="pass") & Q(fresh_until__isnull=True)),
                name="rollout_gate_fresh_only_pass",
            ),
        ]
        indexes = [models.Index(fields=["due_at"], name="rollout_gate_due_idx")]

    def __str__(self) -> str:
        return f"gate {self.name} of {self.rollout_id} ({self.state})"
