"""Rollouts, their waves, node upgrades, tick requests and rollout events.

State machines (one function per transition: the rollout's in rollout/controller/transitions.py, the node
upgrades' in rollout/controller/upgrade_transitions.py):

Rollout:     awaiting_approval -> active | scheduled | denied | aborted   (only when its tenant requires approvals)
             active -> paused -> active;  active|paused -> completed | aborted
             scheduled -> active (startAt, start) | paused | aborted;  paused -> scheduled (startAt ahead)
             active|paused|scheduled|awaiting_approval -> superseded   (a create with ``supersedes``)
NodeUpgrade: pending -> in_flight -> succeeded | failed | rolled_back
             pending -> skipped | cancelled
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from fleet.interface import Node, Pool, Tenant
from rollout.models.querysets import NodeUpgradeQuerySet
from rollout.models.releases import Release, ReleaseBlock


def start_ahead(start_at: datetime | None, *, at: datetime) -> bool:
    """A ``startAt`` still ahead of ``at``: the rollout is held (``scheduled``) until then
    (docs/controller.md#schedules). The one reading of ``startAt``: create, approve, resume and the tick."""
    return start_at is not None and start_at > at


def end_passed(end_by: datetime | None, *, at: datetime) -> bool:
    """An ``endBy`` come by ``at``: the deadline applies (docs/controller.md#schedules). The one reading of
    ``endBy``: the tick's stop and resume's refusal."""
    return end_by is not None and end_by <= at


class Rollout(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "active"
        PAUSED = "paused", "paused"
        COMPLETED = "completed", "completed"
        ABORTED = "aborted", "aborted"
        # Created with a startAt ahead: its nodes are held, nothing starts until then (docs/controller.md#schedules).
        SCHEDULED = "scheduled", "scheduled"
        # docs/controller.md#approvals: created in a tenant that requires approvals; nothing starts yet.
        AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
        DENIED = "denied", "denied"
        # docs/controller.md#undoing-a-bad-release: a newer rollout took its place (``supersededBy``).
        SUPERSEDED = "superseded", "superseded"

    # The states that hold their nodes (a create over them is a conflict) and that the tick visits.
    ACTIVE_STATES = (State.ACTIVE, State.PAUSED, State.SCHEDULED)
    #: Every state that holds its snapshotted nodes (the one-writer rule; a create over them is a 409
    #: ``conflict``): the tick's, and awaiting approval, which the tick passes by.
    HOLDING_STATES = (State.ACTIVE, State.PAUSED, State.SCHEDULED, State.AWAITING_APPROVAL)
    TERMINAL_STATES = (State.COMPLETED, State.ABORTED, State.DENIED, State.SUPERSEDED)

    class PausedReason(models.TextChoices):
        FAILURE_RATIO = "failure_ratio", "failure ratio exceeded"
        OPERATOR = "operator", "paused by an operator"
        RELEASE_BLOCKED = "release_blocked", "the release is blocked in this tenant"
        RELEASE_EXPIRED = "release_expired", "the release has expired"
        DEADLINE = "deadline", "its endBy passed"

    class EndBehavior(models.TextChoices):
        """What a rollout does at its ``endBy`` (docs/controller.md#schedules)."""

        PAUSE = "pause", "pause"
        ABORT = "abort", "abort"
        ABORT_ROLLBACK = "abort_rollback", "abort with rollback"

    #: ``pausedReason`` of a pause by a gate, and ``abortedReason`` of its abort: this prefix and the gate's name.
    GATE_FAILED_PREFIX = "gate_failed:"

    class AbortedReason(models.TextChoices):
        """Why a rollout was aborted (``abortedReason``); a gate's abort is ``gate_failed:<name>``."""

        MANUAL = "manual", "aborted by an operator"
        DEADLINE = "deadline", "aborted at its endBy"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rollouts")
    release = models.ForeignKey(Release, on_delete=models.PROTECT, related_name="rollouts")
    pools = models.ManyToManyField(Pool, related_name="rollouts")
    waves = models.JSONField(help_text="Cumulative percentages, as requested.")
    max_failure_ratio = models.DecimalField(
        max_digits=6, decimal_places=5, validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(1))]
    )
    soak_seconds = models.PositiveIntegerField()
    # The current wave's failure ratio is judged once this many of its nodes settled (docs/controller.md#the-tick).
    failure_ratio_min_settled = models.PositiveIntegerField(default=0)
    upgrade_timeout_seconds = models.PositiveIntegerField()
    # A node that rejoined on the target succeeds only after staying joined this long (minReadySeconds).
    min_ready_seconds = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=32, choices=State.choices, default=State.ACTIVE)
    # Approvals it needs from users other than its creator before it starts: its tenant's
    # rollout_approvals when it was created (docs/controller.md#approvals).
    approvals_required = models.PositiveSmallIntegerField(default=0)
    # When its last approval made it active (the controller's staleness counts from then, not from creation).
    approved_at = models.DateTimeField(null=True, blank=True)
    current_wave = models.PositiveIntegerField(default=0)
    # When the next wave may start: soakSeconds after the current wave's last node settled.
    next_wave_at = models.DateTimeField(null=True, blank=True)
    # Failures of the current wave an operator accepted by resuming; only more re-pause.
    acknowledged_failures = models.PositiveIntegerField(default=0)
    # A PausedReason, or "gate_failed:<gate name>" (docs/controller.md#gates).
    paused_reason = models.CharField(max_length=80, choices=PausedReason.choices, null=True, blank=True)
    # docs/api.md#rollouts-to-a-selection: the label selector the snapshot was taken with (null: none), and the
    # pools it covered only in part (their default version does not move on completion).
    selector = models.TextField(null=True, blank=True)
    partly_covered_pool_ids = models.JSONField(default=list, blank=True)
    # docs/controller.md#schedules: when it starts (null: at once), its deadline and what happens then.
    start_at = models.DateTimeField(null=True, blank=True)
    end_by = models.DateTimeField(null=True, blank=True)
    end_behavior = models.CharField(max_length=16, choices=EndBehavior.choices, null=True, blank=True)
    # Gates (rollout/models/gates.py): how often each is asked, and how many failures in a row pause.
    gate_interval_seconds = models.PositiveIntegerField(default=30)
    gate_failure_limit = models.PositiveIntegerField(default=3)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)
    # An AbortedReason, or "gate_failed:<gate name>" (docs/controller.md#gates); null unless aborted.
    aborted_reason = models.CharField(max_length=80, null=True, blank=True)
    # docs/controller.md#undoing-a-bad-release: the rollout this one superseded at its create (one at most: a
    # rollout is superseded once, which the unique index makes a database fact).
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    # Nodes the create left out because they run a release of a higher sequence (``excluded.newer``).
    excluded_newer = models.PositiveIntegerField(default=0)
    # When a tick last reconciled it (``lastTickAt``); null before the first (docs/controller.md#no-controller).
    last_tick_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_failure_ratio__gte=0) & Q(max_failure_ratio__lte=1), name="rollout_ratio_fraction"
            ),
            models.CheckConstraint(condition=Q(upgrade_timeout_seconds__gte=1), name="rollout_timeout_positive"),
            models.CheckConstraint(
                condition=Q(state="paused", paused_reason__isnull=False) | ~Q(state="paused"),
                name="rollout_paused_has_reason",
            ),
            models.CheckConstraint(
                condition=~Q(state="awaiting_approval") | Q(approvals_required__gte=1),
                name="rollout_awaiting_needs_approvals",
            ),
        ]
        indexes = [models.Index(fields=["state"], name="rollout_state_idx")]

    def __str__(self) -> str:
        return f"rollout {self.id} of {self.release.version} ({self.state})"

    def release_blocked(self) -> bool:
        """Whether its tenant blocked its release (one query; docs/controller.md#blocking-a-release-per-tenant)."""
        return ReleaseBlock.objects.blocking(tenant=self.tenant_id, release=self.release_id).exists()

    def on_last_wave(self, *, last_index: int) -> bool:
        """Whether its current wave is its last one (``last_index``: the highest index of its waves)."""
        return self.current_wave >= last_index

    def wave_settles(self, wave: RolloutWave, *, at: datetime) -> None:
        """Record on these instances that ``wave`` settled ``at`` (its last node's settle): its soak ends
        ``soak_seconds`` later (``next_wave_at``). The tick's advance saves them
        (``transitions.wave_settled_record``); the plan foresees it on copies."""
        wave.settled_at = at
        self.next_wave_at = at + timedelta(seconds=self.soak_seconds)

    def soak_until(self, *, at: datetime) -> datetime | None:
        """When a soak that may run at ``at`` ends: ``next_wave_at``, while active and ahead of ``at``; else None.

        The tick's advance sets it when a wave settles (its settled time plus ``soak_seconds``); whether
        the rollout soaks also needs that wave settled and not the last (``soaking``)."""
        if self.state != Rollout.State.ACTIVE or self.next_wave_at is None or self.next_wave_at <= at:
            return None
        return self.next_wave_at

    def soaking(self, *, wave: RolloutWave | None, last_index: int, at: datetime) -> bool:
        """The soak: active, its current ``wave`` settled (``RolloutWave.settled``), not the last, and
        ``soak_until`` ahead of ``at`` (docs/controller.md#the-tick, Advance). The tick, the plan and promote read
        it here."""
        settled = wave is not None and wave.index == self.current_wave and wave.settled
        return settled and not self.on_last_wave(last_index=last_index) and self.soak_until(at=at) is not None


class TickRequest(models.Model):
    """Debounce of "tick this rollout soon" (asked for when a node settles).

    A row of its own, not a field of Rollout: asking must never wait for the
    rollout's row lock, which a running tick holds.
    """

    rollout = models.OneToOneField(Rollout, on_delete=models.CASCADE, primary_key=True, related_name="tick_request")
    # A tick will start and read after whoever raised it: a message is on its way, or the running tick goes again.
    queued = models.BooleanField(default=False)
    # While a tick runs (until it ends, at most this late: a killed worker's mark lapses), an ask raises ``queued``
    # and sends nothing: the running tick sees it when it ends and ticks again (controller/tick_requests.py).
    running_until = models.DateTimeField(null=True, blank=True)
    # When the rollout's one ``rollout/timeouts-due`` message is due (null: none published); one per rollout,
    # not one per tick that starts nodes (rollout/controller/timeouts.py).
    timeouts_due_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"tick request of {self.rollout_id} ({'queued' if self.queued else 'idle'})"


class RolloutWave(models.Model):
    """A non-empty wave of a rollout. Counts come from its node upgrades."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="wave_rows")
    index = models.PositiveIntegerField()
    percent = models.DecimalField(max_digits=8, decimal_places=5)
    total = models.PositiveIntegerField()
    started_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rollout", "index"]
        constraints = [models.UniqueConstraint(fields=["rollout", "index"], name="rollout_wave_index_unique")]

    def __str__(self) -> str:
        return f"wave {self.index + 1} of {self.rollout_id}"

    @property
    def settled(self) -> bool:
        """None of its nodes is pending or in flight any more, and a tick recorded it (its advance sets
        ``settled_at``): its soak runs from then, and the next wave waits for it."""
        return self.settled_at is not None


class NodeUpgrade(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "pending"
        IN_FLIGHT = "in_flight", "in flight"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        SKIPPED = "skipped", "skipped"
        CANCELLED = "cancelled", "cancelled"
        ROLLED_BACK = "rolled_back", "rolled back"

    class Reason(models.TextChoices):
        OFFLINE = "offline", "the node's agent was offline"
        NO_BINARY = "no_binary", "the release has no binary for the node's arch"
        TIMEOUT = "timeout", "the node did not rejoin on the target version in time"
        ABORTED = "aborted", "the rollout was aborted"
        ROLLED_BACK = "rolled_back", "returned to its previous release"
        PREVIOUS_NOT_REGISTERED = "previous_not_registered", "no registered previous release to roll back to"
        SUPERSEDED = "superseded", "a newer rollout took the node (this one was superseded, or aborted)"
        DENIED = "denied", "the rollout was denied"
        NOT_READY = "not_ready", "the node left, went offline or changed version before minReadySeconds passed"
        # The node's agent refused to run the release (docs/signing.md#what-an-agent-checks): "refused:<code>".
        REFUSED_BAD_ROOT = "refused:bad_root", "the node refused it: the server offered a root it could not verify"
        REFUSED_BAD_SIGNATURE = "refused:bad_signature", "the node refused it: not signed by the keys it trusts"
        REFUSED_WRONG_VERSION = "refused:wrong_version", "the node refused it: the signed release is another version"
        REFUSED_EXPIRED = "refused:expired", "the node refused it: the release has expired"
        REFUSED_SEQUENCE_ROLLBACK = "refused:sequence_rollback", "the node refused it: older than a release it ran"
        REFUSED_DIGEST_MISMATCH = "refused:digest_mismatch", "the node refused it: the bytes are not the signed ones"
        REFUSED_DOWNLOAD_FAILED = "refused:download_failed", "the node could not download the binary"

    id = models.BigAutoField(primary_key=True)
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="node_upgrades")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="upgrades")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    wave = models.PositiveIntegerField()
    position = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # True while this row is the node's one writer: its rollout is active or
    # paused, or the upgrade is still in flight. A partial unique index on it
    # makes "a node is in at most one active rollout" a database fact.
    claims_node = models.BooleanField(default=True)
    target_version = models.CharField(max_length=64)
    previous_daemon = models.JSONField(null=True, blank=True)
    previous_version = models.CharField(max_length=64, null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    # When its session rejoined reporting the target while minReadySeconds > 0 (the session's joined_at); the row
    # stays in flight while it proves itself (docs/controller.md#readiness-before-success-minreadyseconds).
    arrived_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=32, choices=Reason.choices, null=True, blank=True)

    objects = NodeUpgradeQuerySet.as_manager()

    class Meta:
        ordering = ["rollout", "position"]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=Q(claims_node=True), name="node_upgrade_one_writer"),
            models.UniqueConstraint(fields=["rollout", "position"], name="node_upgrade_position_unique"),
            models.UniqueConstraint(fields=["rollout", "node"], name="node_upgrade_node_once_per_rollout"),
            models.CheckConstraint(
                condition=~Q(state="in_flight") | (Q(started_at__isnull=False) & Q(deadline__isnull=False)),
                name="node_upgrade_in_flight_has_deadline",
            ),
            models.CheckConstraint(
                condition=~Q(state="in_flight") | Q(claims_node=True), name="node_upgrade_in_flight_claims_node"
            ),
        ]
        indexes = [
            models.Index(fields=["rollout", "wave", "state", "position"], name="nu_wave_state_idx"),
            models.Index(fields=["pool"], condition=Q(state="in_flight"), name="nu_in_flight_pool_idx"),
            # Failed upgrades still count against the budget until their node is back (docs/controller.md#budget).
            models.Index(fields=["pool"], condition=Q(state="failed"), name="nu_failed_pool_idx"),
            models.Index(fields=["deadline"], condition=Q(state="in_flight"), name="nu_in_flight_deadline_idx"),
            # Convergence after completion (docs/controller.md#convergence-after-completion) looks for rows
            # skipped because their node was offline.
            models.Index(
                fields=["node"], condition=Q(state="skipped", reason="offline"), name="nu_skipped_offline_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} in {self.rollout_id} ({self.state})"


class RolloutEvent(models.Model):
    class Kind(models.TextChoices):
        CREATED = "rollout.created", "rollout.created"
        WAVE = "rollout.wave", "rollout.wave"
        PAUSED = "rollout.paused", "rollout.paused"
        RESUMED = "rollout.resumed", "rollout.resumed"
        PROMOTED = "rollout.promoted", "rollout.promoted"
        COMPLETED = "rollout.completed", "rollout.completed"
        ABORTED = "rollout.aborted", "rollout.aborted"
        GATE_FAILED = "rollout.gate_failed", "rollout.gate_failed"
        STARTED = "rollout.started", "rollout.started"
        DEADLINE = "rollout.deadline", "rollout.deadline"
        APPROVED = "rollout.approved", "rollout.approved"
        DENIED = "rollout.denied", "rollout.denied"
        SUPERSEDED = "rollout.superseded", "rollout.superseded"
        # A node's agent refused the release (docs/signing.md#what-an-agent-checks); not a webhook event.
        NODE_UPGRADE_REFUSED = "node_upgrade.refused", "node_upgrade.refused"

    id = models.BigAutoField(primary_key=True)
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    at = models.DateTimeField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"
