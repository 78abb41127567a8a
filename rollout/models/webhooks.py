"""Webhooks (docs/webhooks.md): a tenant's subscriptions and each event's deliveries to them, at least once."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from fleet.interface import Tenant


class Webhook(models.Model):
    """A tenant's subscription: ``events`` (rollout event kinds) are POSTed to ``url``, signed with ``secret``."""

    EVENTS = (
        "rollout.created",
        "rollout.wave",
        "rollout.paused",
        "rollout.resumed",
        "rollout.promoted",
        "rollout.completed",
        "rollout.aborted",
        "rollout.gate_failed",
        "rollout.started",
        "rollout.deadline",
        "rollout.approved",
        "rollout.denied",
        "rollout.superseded",
    )

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(max_length=2000)
    events = models.JSONField(default=list)
    # Stored in clear: the HMAC needs it. Shown once, at creation; never in lists, the admin or logs.
    secret = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["tenant_id", "created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event to one webhook. Transitions: pending -> delivered | failed (attempts exhausted).

    ``id`` is the delivery id (``X-Rollout-Delivery``), the same on every attempt; ``body`` holds
    the exact bytes sent, built at the first attempt, so every retry sends (and signs) the same.
    ``next_attempt_at`` is when a worker may try next: a claim pushes it past the attempt's end.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    rollout_event = models.ForeignKey("rollout.RolloutEvent", on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=32)
    body = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"), name="webhook_delivery_due"),
            models.Index(fields=["webhook", "-created_at"], name="webhook_delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook_id} ({self.status})"
