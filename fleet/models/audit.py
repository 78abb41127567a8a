"""The audit trail (docs/api.md#the-audit-trail): one append-only row per change made by a person or a key.

Rows are written only by ``fleet.services.audit.audit_record``; PostgreSQL refuses UPDATE and
DELETE on the table (a trigger, migration 0002), the admin and the API only read it.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from fleet.models.iam import Tenant

GENESIS_HASH = "0" * 64


class AuditEntry(models.Model):
    """One change. ``seq`` is the entry's place in its chain (the tenant's, or the system chain).

    The system chain (``tenant`` null) holds installation-wide changes made by someone who acts in
    no tenant: a superuser without a membership registering a release.
    """

    class Via(models.TextChoices):
        API = "api", "api"
        ADMIN = "admin", "admin"
        COMMAND = "command", "command"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # PROTECT: a tenant with a trail is not deleted (the trigger would refuse the cascade anyway).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries")
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField()
    actor_user = models.CharField(max_length=150, blank=True)
    actor_via = models.CharField(max_length=8, choices=Via.choices)
    # The API key a change was made through (null: not through a key; entries before migration 0012).
    # Not a foreign key: the trail outlives the key. Shown as actor.apiKeyId/apiKeyName only when set.
    actor_api_key_id = models.BigIntegerField(null=True, blank=True)
    actor_api_key_name = models.CharField(max_length=100, blank=True)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["tenant_id", "-seq"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"
        constraints = [
            # A backstop for the per-chain lock: two appends can never take the same place.
            models.UniqueConstraint(fields=["tenant", "seq"], name="audit_seq_unique_in_tenant"),
            models.UniqueConstraint(fields=["seq"], condition=Q(tenant__isnull=True), name="audit_seq_unique_system"),
        ]
        indexes = [
            models.Index(fields=["tenant", "action", "-seq"], name="audit_tenant_action"),
            models.Index(fields=["tenant", "object_id", "-seq"], name="audit_tenant_object"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type} {self.object_id} by {self.actor_via}:{self.actor_user}"
