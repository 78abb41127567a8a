"""Who approved a rollout awaiting approval (docs/controller.md#approvals); the rules: rollout/rollouts/approvals.py."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RolloutApproval(models.Model):
    """One user's approval of a rollout awaiting approval (docs/controller.md#approvals).

    Unique per (rollout, user): two requests of one user at once record one approval. The
    username is kept beside the user, so the record survives the user's deletion.
    """

    rollout = models.ForeignKey("rollout.Rollout", on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150)
    comment = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["rollout", "at", "id"]
        constraints = [models.UniqueConstraint(fields=["rollout", "user"], name="rollout_approval_once_per_user")]

    def __str__(self) -> str:
        return f"{self.username} approved {self.rollout_id}"
