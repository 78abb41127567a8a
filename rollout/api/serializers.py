"""Shapes of the rollouts' API (camelCase: docs/api.md#rollouts); the releases' are in release_serializers.py.

Input serializers only check types; the rules (waves, ratios, seconds) are
checked once, in rollout/rollouts/spec.py, for the API and the admin alike.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import (
    JSONObjectField,
    ResponseModelSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictNumberField,
    StrictSerializer,
)
from rollout.api.blocker_serializers import NodeBlockerSerializer, RolloutBlockerSerializer
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from rollout.rollouts.blockers import node_blockers
from rollout.rollouts.representation import blocker_json, rollouts_json
from rollout.rollouts.spec import MAX_POOL_IDS, MAX_WAVES, RolloutPlan, RolloutSpec, rollout_spec


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "default": 0})
class RawIntegerField(serializers.JSONField):
    """Passed through as JSON; checked once by rollout.rollouts.spec.options_validate (API and admin)."""


GATE_SCHEMA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"},
        "prometheus": {
            "type": "object",
            "required": ["query", "max"],
            "properties": {"query": {"type": "string", "maxLength": 4096}, "max": {"type": "number"}},
        },
        "http": {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}},
    },
}


@extend_schema_field({"type": "array", "maxItems": 8, "items": GATE_SCHEMA})
class RawGatesField(serializers.JSONField):
    """Passed through as JSON; checked once by ``gates_validate`` (rollout/gates/spec.py; 400 ``invalid_gate``)."""


@extend_schema_field({"type": "string", "maxLength": 4096})
class RawSelectorField(serializers.JSONField):
    """Passed through as JSON; parsed once (fleet.selectors): anything else is 400 ``invalid_selector``."""


@extend_schema_field({"type": "string"})
class RawTimeField(serializers.JSONField):
    """Passed through as JSON; checked once by rollout.rollouts.spec.schedule_validate (400 ``invalid_schedule``)."""


class ActionSerializer(StrictSerializer):
    """pause, start, promote: an optional comment, kept in the audit entry (its rule: rollout.rollouts.actions)."""

    comment = StrictCharField(
        required=False, allow_blank=True, trim_whitespace=False, help_text="0 to 500 characters, in the audit entry."
    )


class ResumeSerializer(ActionSerializer):
    endBy = RawTimeField(required=False, help_text="A later deadline: needed to resume past the rollout's endBy.")


class RolloutCreateSerializer(StrictSerializer):
    """What a create takes. The fields the representation carries as null (``selector``, ``startAt``, ``endBy``,
    ``endBehavior``) take null as "not given": a representation sent back creates the same rollout."""

    version = StrictCharField(max_length=64, trim_whitespace=False)
    # Bounded: an unbounded list costs a query parameter per id and echoes back in errors.
    poolIds = serializers.ListField(
        child=StrictCharField(max_length=64, trim_whitespace=False),
        required=False,
        allow_empty=False,
        max_length=MAX_POOL_IDS,
    )
    waves = serializers.ListField(child=StrictNumberField(), required=False, allow_empty=False, max_length=MAX_WAVES)
    maxFailureRatio = StrictNumberField(required=False)
    soakSeconds = StrictIntegerField(required=False)
    upgradeTimeoutSeconds = StrictIntegerField(required=False)
    minReadySeconds = StrictIntegerField(required=False)
    # Raw JSON: the one check (a JSON integer >= 0) is plan.options_validate's, naming the field.
    failureRatioMinSettled = RawIntegerField(
        required=False, help_text="Judge a wave's failure ratio once this many of its nodes settled (default 0)."
    )
    gates = RawGatesField(required=False, help_text="Health signals no node starts without (docs/controller.md#gates).")
    gateIntervalSeconds = RawIntegerField(required=False, help_text="Each gate is asked this often: 5 to 3600 (30).")
    gateFailureLimit = RawIntegerField(
        required=False, help_text="Failures in a row of one gate that pause: 1 to 100 (3)."
    )
    selector = RawSelectorField(
        required=False, allow_null=True, help_text="Only the nodes whose labels match (docs/api.md#selectors)."
    )
    startAt = RawTimeField(
        required=False, allow_null=True, help_text="Start then (RFC 3339); ahead: the rollout is `scheduled`."
    )
    endBy = RawTimeField(
        required=False, allow_null=True, help_text="The deadline (RFC 3339): after now and after startAt."
    )
    endBehavior = RawTimeField(
        required=False, allow_null=True, help_text="At endBy: `pause` (default), `abort` or `abort_rollback`."
    )
    supersedes = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="A rollout id: this rollout takes its place, in the same transaction (docs/api.md#rollouts).",
    )

    def spec(self) -> RolloutSpec:
        """The service's spec (the one validation of the options: rollout.rollouts.spec.rollout_spec)."""
        data = self.validated_data
        return rollout_spec(
            version=data["version"],
            pool_ids=data.get("poolIds"),
            waves=data.get("waves"),
            max_failure_ratio=data.get("maxFailureRatio"),
            soak_seconds=data.get("soakSeconds"),
            upgrade_timeout_seconds=data.get("upgradeTimeoutSeconds"),
            min_ready_seconds=data.get("minReadySeconds"),
            failure_ratio_min_settled=data.get("failureRatioMinSettled"),
            gates=data.get("gates"),
            gate_interval_seconds=data.get("gateIntervalSeconds"),
            gate_failure_limit=data.get("gateFailureLimit"),
            selector=data.get("selector"),
            start_at=data.get("startAt"),
            end_by=data.get("endBy"),
            end_behavior=data.get("endBehavior"),
            supersedes=data.get("supersedes"),
        )


class AbortSerializer(StrictSerializer):
    rollback = StrictBooleanField(required=False, default=False)


class ApproveSerializer(StrictSerializer):
    """Types only; the comment's rule is rollout.rollouts.approvals'."""

    comment = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, help_text="0 to 500 characters.")


class DenySerializer(StrictSerializer):
    comment = StrictCharField(trim_whitespace=False, help_text="Why: 1 to 500 characters.")


class RolloutWaveSerializer(serializers.Serializer):
    """One wave of a rollout with its nodes counted by upgrade state (a rollout.rollouts.reads.WaveStats)."""

    index = serializers.IntegerField(min_value=0)
    percent = StrictNumberField(help_text="The cumulative percentage requested for this wave.")
    total = serializers.IntegerField(min_value=0)
    pending = serializers.IntegerField(min_value=0)
    inFlight = serializers.IntegerField(min_value=0, source="in_flight")
    succeeded = serializers.IntegerField(min_value=0)
    failed = serializers.IntegerField(min_value=0)
    skipped = serializers.IntegerField(min_value=0)
    rolledBack = serializers.IntegerField(min_value=0, source="rolled_back")
    cancelled = serializers.IntegerField(min_value=0)
    startedAt = serializers.DateTimeField(allow_null=True, source="started_at")
    settledAt = serializers.DateTimeField(allow_null=True, source="settled_at")


class ExcludedSerializer(serializers.Serializer):
    """Nodes of the chosen pools a create left out of the snapshot, by cause."""

    newer = serializers.IntegerField(
        min_value=0, help_text="Nodes running a release of a higher sequence than the target: they would refuse it."
    )


class RolloutApprovalSerializer(serializers.Serializer):
    """One approval of a rollout (docs/controller.md#approvals)."""

    user = serializers.CharField(help_text="The approver's username.")
    at = serializers.DateTimeField()
    comment = serializers.CharField(allow_blank=True)


class RolloutSerializer(ResponseModelSerializer):
    """The rollout (docs/api.md#rollouts), rendered by ``representation.rollout_json`` (webhooks carry the same).

    The fields declare the shape for the OpenAPI description. Context: ``waves`` and ``blockers``
    for a page (``rollouts_json`` reads them at once); without them they are read for the rollout.
    """

    id = serializers.CharField()
    version = serializers.CharField(source="release.version")
    poolIds = serializers.ListField(child=serializers.CharField(), read_only=True)
    selector = serializers.CharField(allow_null=True, help_text="The label selector of the snapshot, as given.")
    startAt = serializers.DateTimeField(source="start_at", allow_null=True)
    endBy = serializers.DateTimeField(source="end_by", allow_null=True)
    endBehavior = serializers.CharField(source="end_behavior", allow_null=True)
    waves = RolloutWaveSerializer(many=True, read_only=True)
    currentWave = serializers.IntegerField(source="current_wave")
    maxFailureRatio = serializers.FloatField(source="max_failure_ratio")
    soakSeconds = serializers.IntegerField(source="soak_seconds")
    upgradeTimeoutSeconds = serializers.IntegerField(source="upgrade_timeout_seconds")
    minReadySeconds = serializers.IntegerField(source="min_ready_seconds")
    failureRatioMinSettled = serializers.IntegerField(source="failure_ratio_min_settled")
    gateIntervalSeconds = serializers.IntegerField(source="gate_interval_seconds")
    gateFailureLimit = serializers.IntegerField(source="gate_failure_limit")
    pausedReason = serializers.CharField(
        source="paused_reason", allow_null=True, help_text="A reason, or `gate_failed:<gate name>`."
    )
    createdAt = serializers.DateTimeField(source="created_at")
    completedAt = serializers.DateTimeField(source="completed_at", allow_null=True)
    abortedReason = serializers.CharField(
        source="aborted_reason", allow_null=True, help_text="Aborted: `manual`, `deadline` or `gate_failed:<gate>`."
    )
    supersedes = serializers.CharField(allow_null=True, help_text="The rollout this one superseded at its create.")
    supersededBy = serializers.CharField(allow_null=True, help_text="Superseded: the rollout that took its place.")
    blocker = RolloutBlockerSerializer(allow_null=True, read_only=True)
    excluded = ExcludedSerializer(read_only=True)
    lastTickAt = serializers.DateTimeField(
        source="last_tick_at",
        allow_null=True,
        help_text="When a tick last reconciled the rollout; null before the first (blocker `no_controller`).",
    )
    createdBy = serializers.CharField(allow_null=True, help_text="The username of the user who created it.")
    approvalsRequired = serializers.IntegerField(
        source="approvals_required", help_text="Approvals it needs from users other than its creator (0: none)."
    )
    approvals = RolloutApprovalSerializer(many=True, read_only=True)

    class Meta:
        model = Rollout
        fields = [
            "id",
            "version",
            "state",
            "poolIds",
            "selector",
            "startAt",
            "endBy",
            "endBehavior",
            "waves",
            "currentWave",
            "maxFailureRatio",
            "soakSeconds",
            "upgradeTimeoutSeconds",
            "minReadySeconds",
            "failureRatioMinSettled",
            "gateIntervalSeconds",
            "gateFailureLimit",
            "pausedReason",
            "createdAt",
            "completedAt",
            "abortedReason",
            "supersedes",
            "supersededBy",
            "blocker",
            "excluded",
            "lastTickAt",
            "createdBy",
            "approvalsRequired",
            "approvals",
        ]

    def to_representation(self, instance: Rollout) -> dict[str, Any]:
        (shown,) = rollouts_json(
            [instance], now=timezone.now(), waves=self.context.get("waves"), blockers=self.context.get("blockers")
        )
        return shown


class PlannedGateSerializer(serializers.Serializer):
    """A gate as the create would store it: its definition and its first result (Prometheus asked once)."""

    name = serializers.CharField()
    prometheus = serializers.DictField(required=False, help_text='`{"query", "max"}`: a Prometheus gate.')
    http = serializers.DictField(required=False, help_text='`{"url"}`: an HTTP gate.')
    # The gates' states (RolloutGateSerializer's enum): a second enum of the same name would collide in the schema.
    state = serializers.CharField(help_text="`pass`, `fail`, `inconclusive` or `pending` (an HTTP gate).")
    value = serializers.FloatField(allow_null=True)
    detail = serializers.CharField(allow_null=True, help_text="Null for a pass; the provider's error if inconclusive.")


class PlannedWaveSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    percent = StrictNumberField()
    total = serializers.IntegerField(min_value=1)
    pools = serializers.DictField(child=serializers.IntegerField(), help_text="Nodes of this wave per pool id.")


class PlannedBudgetSerializer(serializers.Serializer):
    allowed = serializers.IntegerField(help_text="ceil(disruptionBudget x nodes in the pool).")
    inUse = serializers.IntegerField(help_text="Nodes of the pool disrupted now.", source="in_use")


class RolloutPlanSerializer(serializers.Serializer):
    """The answer of a dry run (``?dryRun=true``, a rollout.rollouts.spec.RolloutPlan). Nothing is written."""

    version = serializers.CharField()
    poolIds = serializers.ListField(child=serializers.CharField(), source="pool_ids")
    selector = serializers.CharField(allow_null=True, help_text="The label selector, as parsed.")
    nodes = serializers.IntegerField(min_value=1)
    waves = PlannedWaveSerializer(many=True)
    budgets = serializers.DictField(child=PlannedBudgetSerializer(), help_text="Per pool id.")
    maxFailureRatio = serializers.FloatField(source="options.max_failure_ratio")
    soakSeconds = serializers.IntegerField(source="options.soak_seconds")
    upgradeTimeoutSeconds = serializers.IntegerField(source="options.upgrade_timeout_seconds")
    minReadySeconds = serializers.IntegerField(source="options.min_ready_seconds")
    failureRatioMinSettled = serializers.IntegerField(source="options.failure_ratio_min_settled")
    estimatedSeconds = serializers.IntegerField(
        allow_null=True,
        source="estimated_seconds",
        help_text="Worst case (every node takes the whole timeout, starts only while its pool's maintenance "
        "windows are open); null when a pool's budget allows no node.",
    )
    excluded = serializers.SerializerMethodField()
    startAt = serializers.DateTimeField(source="schedule.start_at", allow_null=True)
    endBy = serializers.DateTimeField(source="schedule.end_by", allow_null=True)
    endBehavior = serializers.CharField(
        source="schedule.end_behavior", allow_null=True, help_text="`pause` when only `endBy` is given."
    )
    gates = serializers.SerializerMethodField()
    gateIntervalSeconds = serializers.IntegerField(source="gates.interval_seconds")
    gateFailureLimit = serializers.IntegerField(source="gates.failure_limit")

    @extend_schema_field(ExcludedSerializer)
    def get_excluded(self, plan: RolloutPlan) -> dict[str, int]:
        return {"newer": plan.excluded_newer}

    @extend_schema_field(PlannedGateSerializer(many=True))
    def get_gates(self, plan: RolloutPlan) -> list[dict[str, object]]:
        return plan.planned_gates()


class NodeUpgradeSerializer(ResponseModelSerializer):
    nodeId = serializers.CharField(source="node_id")
    poolId = serializers.CharField(source="pool_id")
    previousVersion = serializers.CharField(source="previous_version", allow_null=True)
    startedAt = serializers.DateTimeField(source="started_at", allow_null=True)
    settledAt = serializers.DateTimeField(source="settled_at", allow_null=True)
    blocker = serializers.SerializerMethodField()

    class Meta:
        model = NodeUpgrade
        fields = [
            "nodeId",
            "poolId",
            "wave",
            "position",
            "state",
            "previousVersion",
            "startedAt",
            "deadline",
            "settledAt",
            "reason",
            "blocker",
        ]

    @extend_schema_field(NodeBlockerSerializer(allow_null=True))
    def get_blocker(self, upgrade: NodeUpgrade) -> dict[str, Any] | None:
        blockers = self.context.get("blockers")  # the list passes its page's (constant queries)
        if blockers is None:
            blockers = node_blockers([upgrade], now=timezone.now())
        return blocker_json(blockers.get(upgrade.pk))


class RolloutGateSerializer(serializers.Serializer):
    """A gate's latest result (docs/controller.md#gates)."""

    name = serializers.CharField()
    state = serializers.ChoiceField(choices=["pass", "fail", "inconclusive", "pending"])
    value = serializers.FloatField(allow_null=True, help_text="Prometheus: the largest sample; HTTP: the status.")
    at = serializers.DateTimeField(allow_null=True, help_text="When it was taken; null while pending.")
    consecutiveFailures = serializers.IntegerField(min_value=0)
    detail = serializers.CharField(
        allow_null=True,
        help_text="Null for a pass and while pending; the provider's error text when inconclusive; for a fail, "
        "the value against the maximum (Prometheus) or the status (HTTP).",
    )
    onFailure = serializers.ChoiceField(
        choices=["pause", "abort", "abort_rollback"], help_text="What gateFailureLimit failures in a row do."
    )


class RolloutEventSerializer(ResponseModelSerializer):
    data = JSONObjectField()  # type: ignore[assignment]  # the event's field is named "data" (docs/api.md#rollouts)

    class Meta:
        model = RolloutEvent
        fields = ["kind", "at", "data"]
