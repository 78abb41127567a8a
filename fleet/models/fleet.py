"""The host fleet: pools, nodes with desired state, agent sessions, workflows, commands."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.contrib.postgres.indexes import GinIndex
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from fleet.models.iam import Tenant

ARCH_VALIDATOR = RegexValidator(r"^[a-z0-9_]+$", "arch is lowercase letters, digits and '_'.")
DEFAULT_DISRUPTION_BUDGET = Decimal("0.05")


def empty_spec() -> dict:
    return {"daemon": None}


class Pool(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="pools")
    name = models.CharField(max_length=100)
    # A fraction in [0, 1]; Decimal so that ceil(budget * n) has no float error.
    disruption_budget = models.DecimalField(
        max_digits=6,
        decimal_places=5,
        default=DEFAULT_DISRUPTION_BUDGET,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(1))],
    )
    default_daemon_version = models.CharField(max_length=64, null=True, blank=True)
    # docs/api.md#pools: the API form of the windows, as fleet.windows.parse_windows accepted them
    # (empty: always open). Written only through fleet.services.pools, which validates them.
    maintenance_windows = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="pool_name_unique_in_tenant"),
            models.CheckConstraint(
                condition=Q(disruption_budget__gte=0) & Q(disruption_budget__lte=1),
                name="pool_disruption_budget_fraction",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="nodes")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    name = models.CharField(max_length=200)
    arch = models.CharField(max_length=32, validators=[ARCH_VALIDATOR])
    # Desired state. spec["daemon"] is None or {"version", "url", "sha256"}.
    spec = models.JSONField(default=empty_spec)
    # docs/api.md#labels: string to string, checked by fleet.labels.labels_validate; selectors read it
    # through the GIN index (fleet.services.labels.selector_q).
    labels = models.JSONField(default=dict, blank=True)
    agent_token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="node_name_unique_in_tenant"),
        ]
        indexes = [
            models.Index(fields=["pool", "name"], name="node_pool_idx"),
            GinIndex(fields=["labels"], name="node_labels_gin"),
        ]

    def __str__(self) -> str:
        return self.name


class NodeSession(models.Model):
    """The node agent's current session: one row per node, updated by each heartbeat.

    Online while ``left_at`` is null and ``last_seen_at`` is within
    3 x heartbeatSeconds of now (see fleet.services.sessions). No index covers a column a session
    request writes, and the table's pages are half empty (migration 0006): PostgreSQL rewrites the
    row in place, whether or not autovacuum runs (docs/operations.md#session-rows).
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="session")
    daemon_version = models.CharField(max_length=64)
    protocol_version = models.PositiveIntegerField()
    joined_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    left_at = models.DateTimeField(null=True, blank=True)
    #: The web process whose memory may hold a read of this session (its watch hub's ``ident``): a change to the
    #: session is notified on that process's own channel alone; null, on the channel every process listens on
    #: (fleet/migrations/0011_session_watched_by.py, docs/fleet.md#watch).
    watched_by = models.CharField(max_length=16, null=True, blank=True, editable=False)

    def __str__(self) -> str:
        return f"{self.node} ({self.daemon_version})"


class Workflow(models.Model):
    class Kind(models.TextChoices):
        REMEDIATION = "remediation", "remediation"
        MAINTENANCE = "maintenance", "maintenance"

    class State(models.TextChoices):
        """active -> finished."""

        ACTIVE = "active", "active"
        FINISHED = "finished", "finished"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workflows")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="workflows")
    # Denormalised from node so the budget counts a pool's disruption in one index scan.
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="workflows")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "kind"], condition=Q(state="active"), name="workflow_one_active_per_node_kind"
            ),
            models.CheckConstraint(
                condition=Q(state="active", finished_at__isnull=True) | Q(state="finished", finished_at__isnull=False),
                name="workflow_finished_at_matches_state",
            ),
        ]
        indexes = [models.Index(fields=["pool"], condition=Q(state="active"), name="workflow_active_pool_idx")]

    def __str__(self) -> str:
        return f"{self.kind} on {self.node} ({self.state})"


class Command(models.Model):
    """A command for a node agent, delivered with each heartbeat until acked.

    pending -> acked | failed (by the agent's ack); pending | acked -> done
    (self-terminating kinds such as daemon.upgrade, when the agent rejoins on
    the payload's version); pending | acked -> cancelled (superseded).
    """

    class Kind(models.TextChoices):
        DAEMON_UPGRADE = "daemon.upgrade", "daemon.upgrade"

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        ACKED = "acked", "acked"
        FAILED = "failed", "failed"
        DONE = "done", "done"
        CANCELLED = "cancelled", "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="commands")
    kind = models.CharField(max_length=64, choices=Kind.choices)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    acked_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["node"], condition=Q(state="pending"), name="command_pending_node_idx")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.node} ({self.state})"


class FleetPulse(models.Model):
    """Whether the server has been hearing its fleet (one row): liveness is judged against it.

    Agents heartbeat through the web tier into the database; while either is
    down nothing is heard, and every node's ``last_seen_at`` ages although its
    agent keeps running. ``listening_since`` is when the current unbroken run of
    heard heartbeats began: a node can be called offline only while the server
    hears the fleet and has listened for a whole online window (fleet.services.liveness).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_heard_at = models.DateTimeField()
    listening_since = models.DateTimeField()

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="fleet_pulse_singleton")]

    def __str__(self) -> str:
        return f"fleet heard since {self.listening_since:%Y-%m-%d %H:%M:%S}"
