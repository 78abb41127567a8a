"""Tenants, their users, API keys and IAM grants."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

#: A tenant may require at most this many approvals of each rollout (docs/controller.md#approvals).
MAX_ROLLOUT_APPROVALS = 5


def default_rollout_approvals() -> int:
    """A new tenant's ``rollout_approvals``: ``ROLLOUT_APPROVALS`` (0 unless set; fleet.E009 checks it)."""
    value = getattr(settings, "ROLLOUT_APPROVALS", 0)
    return value if type(value) is int and 0 <= value <= MAX_ROLLOUT_APPROVALS else 0


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # How many users other than its creator must approve each new rollout before it starts (0: none).
    # Changed by a superuser (the admin) or ``manage.py settenant``, never through the tenant's API keys.
    rollout_approvals = models.PositiveSmallIntegerField(
        default=default_rollout_approvals,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_ROLLOUT_APPROVALS)],
        help_text=f"Approvals (0 to {MAX_ROLLOUT_APPROVALS}) each new rollout needs from users other than its "
        "creator before it starts. Only superusers change it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(rollout_approvals__gte=0) & Q(rollout_approvals__lte=MAX_ROLLOUT_APPROVALS),
                name="tenant_rollout_approvals_range",
            )
        ]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user belongs to exactly one tenant and acts in it."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant}"


class Permission(models.TextChoices):
    FLEET_ADMIN = "compute:fleet:admin", "compute:fleet:admin"
    # Approving and denying rollouts (docs/controller.md#approvals); compute:fleet:admin alone does not.
    ROLLOUT_APPROVE = "compute:rollout:approve", "compute:rollout:approve"


class Grant(models.Model):
    """``permission`` on ``scope`` of ``tenant`` for ``user``."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="grants")
    permission = models.CharField(max_length=64, choices=Permission.choices)
    scope = models.CharField(max_length=64, default="fleet")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "permission", "scope"], name="grant_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.permission} on {self.tenant}/{self.scope} for {self.user}"


class Scope(models.TextChoices):
    """What a key may call (docs/api.md#scopes); each API method requires exactly one."""

    READ = "read", "read"  # every GET
    ROLLOUTS = "rollouts", "rollouts"  # create, dry run, pause, resume, abort, promote, start; webhooks
    APPROVE = "approve", "approve"  # approve, deny (the compute:rollout:approve grant is needed too)
    NODES = "nodes", "nodes"  # nodes, pools, labels, workflows; the caller's own keys
    RELEASES = "releases", "releases"  # register, block, unblock, release roots


def every_scope() -> list[str]:
    """A key's default scopes: all of them (``createapikey`` without ``--scope``, keys made before 0012)."""
    return list(Scope.values)


class ApiKey(models.Model):
    """A bearer key. Only its SHA-256 is stored; the plain key is shown once.

    ``scopes`` bound what it may call, ``expires_at`` (null: never) when it stops working;
    ``last_used_at`` is written at most once a minute (fleet.services.iam.api_key_touch).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True, help_text="What the key is for (a pipeline, a person).")
    prefix = models.CharField(max_length=16, help_text="The first characters of the key, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=every_scope)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: the key never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(condition=Q(scopes__contained_by=Scope.values), name="apikey_scopes_known"),
            models.CheckConstraint(condition=Q(scopes__len__gte=1), name="apikey_scopes_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
