"""JSON shapes of the fleet and agent APIs (camelCase). Validation of types only; rules live in services."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import (
    PG_INT_MAX,
    FractionField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictRegexField,
    StrictSerializer,
    StrictUUIDField,
)
from fleet.api.agent_session import VERSION_REGEX
from fleet.api.schema import AgentCommandSerializer, NodeSpecSerializer
from fleet.models import Workflow
from fleet.models.fleet import DEFAULT_DISRUPTION_BUDGET
from fleet.models.iam import MAX_ROLLOUT_APPROVALS
from fleet.plugins import refusal_codes
from fleet.services.audit import entry_representation
from fleet.services.nodes import node_is_online, node_session
from fleet.services.pools import pool_policy
from fleet.services.watch import SEEN_MAX_LENGTH, WAIT_MAX_SECONDS, WAIT_MIN_SECONDS


@extend_schema_field(NodeSpecSerializer)
class NodeSpecField(serializers.JSONField):
    """A node's spec, rendered as stored; described as its shape (fleet/api/schema.py)."""


@extend_schema_field(AgentCommandSerializer(many=True))
class AgentCommandsField(serializers.ListField):
    """The commands an agent must run, rendered as queued; described as their shape."""


# --- pools -----------------------------------------------------------------------------
class MaintenanceWindowSerializer(serializers.Serializer):
    """One weekly window (docs/api.md#pools); described here, checked by fleet.windows.parse_windows."""

    days = serializers.ListField(
        child=serializers.ChoiceField(choices=["mon", "tue", "wed", "thu", "fri", "sat", "sun"]),
        min_length=1,
        max_length=7,
    )
    start = serializers.RegexField(r"^([01][0-9]|2[0-3]):[0-5][0-9]$", help_text='24-hour local time "HH:MM".')
    durationMinutes = serializers.IntegerField(min_value=1, max_value=10080)
    timezone = serializers.CharField(required=False, default="UTC", help_text="An IANA time zone name.")


# The windows are taken as raw JSON and checked once, by the service (fleet.windows.parse_windows),
# so that a bad one answers 400 invalid_window naming the field, as in the admin.
@extend_schema_field(
    {
        "type": "array",
        "nullable": True,
        "maxItems": 32,
        "items": {"$ref": "#/components/schemas/MaintenanceWindow"},
        "description": "Weekly maintenance windows; nodes of the pool start only while one is open. "
        "Absent, null or empty: always open.",
    }
)
class WindowsField(serializers.JSONField):
    pass


class PolicySerializer(StrictSerializer):
    disruptionBudget = FractionField(source="disruption_budget", default=DEFAULT_DISRUPTION_BUDGET)
    maintenanceWindows = WindowsField(source="maintenance_windows", required=False, allow_null=True)


class PolicyPatchSerializer(StrictSerializer):
    """A PATCH's policy: only the fields given are replaced (no defaults)."""

    disruptionBudget = FractionField(required=False)
    maintenanceWindows = WindowsField(required=False, allow_null=True)


class PoolInSerializer(StrictSerializer):
    name = StrictCharField(max_length=100, trim_whitespace=False)
    policy = PolicySerializer(required=False)


class PoolPatchSerializer(StrictSerializer):
    policy = PolicyPatchSerializer()


class PoolPolicySerializer(serializers.Serializer):
    disruptionBudget = serializers.FloatField()
    maintenanceWindows = MaintenanceWindowSerializer(many=True)


class PoolSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    policy = serializers.SerializerMethodField()
    defaultDaemonVersion = serializers.CharField(source="default_daemon_version", allow_null=True)

    @extend_schema_field(PoolPolicySerializer)  # as shown: windows normalised, the MaintenanceWindow component
    def get_policy(self, pool) -> dict:
        return pool_policy(pool)


# --- nodes -----------------------------------------------------------------------------
# Labels are taken as raw JSON and checked once, by fleet.labels.labels_validate (the admin form's validator
# too), so that a bad one answers 400 invalid_labels naming the key.
@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": 63},
        "maxProperties": 64,
        "description": "Label keys to values (docs/api.md#labels).",
    }
)
class LabelsField(serializers.JSONField):
    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("allow_null", True)  # null reaches the validator: 400 invalid_labels where it must
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "description": "A label selector (docs/api.md#selectors), at most 4 KiB."})
class SelectorField(serializers.JSONField):
    """Taken raw and parsed once (fleet.selectors): anything that is not a selector is 400 invalid_selector."""


class NodeInSerializer(StrictSerializer):
    name = StrictCharField(max_length=200, trim_whitespace=False)
    poolId = StrictUUIDField()
    arch = StrictRegexField(r"\A[a-z0-9_]{1,32}\Z", max_length=32, trim_whitespace=False)
    labels = LabelsField(required=False)


class NodePatchSerializer(StrictSerializer):
    labels = LabelsField(help_text="The node's whole label map: it replaces the labels the node had.")


class NodesLabelInSerializer(StrictSerializer):
    selector = SelectorField()
    poolIds = serializers.ListField(child=StrictUUIDField(), required=False, max_length=1000)
    set = LabelsField(required=False, help_text="Labels merged into every matching node's.")
    remove = serializers.JSONField(required=False, help_text="Label keys taken out of every matching node's.")


class NodesLabeledSerializer(serializers.Serializer):
    matched = serializers.IntegerField()


class NodeSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    poolId = serializers.CharField(source="pool_id")
    arch = serializers.CharField()
    spec = NodeSpecField()
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True))
    online = serializers.SerializerMethodField()
    daemonVersion = serializers.SerializerMethodField()
    protocolVersion = serializers.SerializerMethodField()
    lastSeenAt = serializers.SerializerMethodField()

    def get_online(self, node) -> bool:
        return node_is_online(node=node, now=self.context.get("now") or timezone.now())

    def get_daemonVersion(self, node) -> str | None:
        session = node_session(node)
        return session.daemon_version if session else None

    def get_protocolVersion(self, node) -> int | None:
        session = node_session(node)
        return session.protocol_version if session else None

    def get_lastSeenAt(self, node) -> str | None:
        session = node_session(node)
        return serializers.DateTimeField().to_representation(session.last_seen_at) if session else None


class NodeCreatedSerializer(NodeSerializer):
    agentToken = serializers.SerializerMethodField()

    def get_agentToken(self, node) -> str:
        return self.context["agent_token"]


# --- workflows -------------------------------------------------------------------------
class WorkflowInSerializer(StrictSerializer):
    nodeId = StrictUUIDField()
    kind = StrictChoiceField(choices=Workflow.Kind.choices)


class WorkflowSerializer(serializers.Serializer):
    id = serializers.CharField()
    nodeId = serializers.CharField(source="node_id")
    poolId = serializers.CharField(source="pool_id")
    kind = serializers.CharField()
    state = serializers.CharField()
    startedAt = serializers.DateTimeField(source="started_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)


# --- agent -----------------------------------------------------------------------------
class AgentRefusalSerializer(StrictSerializer):
    """The agent refused the daemon its spec named (docs/fleet.md#refusals); codes are the plug-ins'."""

    version = StrictRegexField(VERSION_REGEX, max_length=64, trim_whitespace=False)
    code = StrictCharField(max_length=64, trim_whitespace=False)
    detail = StrictCharField(max_length=1000, allow_blank=True, trim_whitespace=False)

    def validate_code(self, value: str) -> str:
        codes = refusal_codes()
        if value not in codes:
            raise serializers.ValidationError(f"One of: {', '.join(sorted(codes)) or '(none)'}.")
        return value


class AgentSessionInSerializer(StrictSerializer):
    daemonVersion = StrictRegexField(VERSION_REGEX, max_length=64, trim_whitespace=False)
    protocolVersion = StrictIntegerField(min_value=1, max_value=PG_INT_MAX)
    refused = AgentRefusalSerializer(required=False)
    # docs/fleet.md#watch: with ``wait``, an answer that would repeat ``seen`` is held.
    wait = StrictIntegerField(
        required=False,
        min_value=WAIT_MIN_SECONDS,
        max_value=WAIT_MAX_SECONDS,
        help_text="Hold the answer up to this many seconds while the revision is still `seen`.",
    )
    seen = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=SEEN_MAX_LENGTH,
        trim_whitespace=False,
        help_text="The specRevision the agent has.",
    )


class AgentSessionSerializer(serializers.Serializer):
    spec = NodeSpecField()
    commands = AgentCommandsField(child=serializers.DictField())
    heartbeatSeconds = serializers.IntegerField(source="heartbeat_seconds")
    specRevision = serializers.CharField(
        source="spec_revision", help_text="Changes when, and only when, the spec or the pending commands change."
    )


class CommandAckInSerializer(StrictSerializer):
    ok = StrictBooleanField()
    error = StrictCharField(required=False, allow_blank=True, allow_null=True, max_length=4000, trim_whitespace=False)


class CommandSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField()
    state = serializers.CharField()
    payload = serializers.JSONField()


# --- the audit trail ---------------------------------------------------------------------
class AuditActorSerializer(serializers.Serializer):
    user = serializers.CharField()
    via = serializers.ChoiceField(choices=["api", "admin", "command"])
    apiKeyId = serializers.IntegerField(required=False, help_text="The key a change was made through (only then).")
    apiKeyName = serializers.CharField(required=False, help_text="That key's name (only with apiKeyId).")


class AuditEntrySerializer(serializers.Serializer):
    """An audit entry (docs/api.md#the-audit-trail). Rendered by ``fleet.services.audit.entry_representation``: the
    very function the hash is computed from, so the API shows exactly what the hash covers."""

    id = serializers.CharField()
    at = serializers.DateTimeField()
    actor = AuditActorSerializer()
    action = serializers.CharField()
    objectType = serializers.CharField()
    objectId = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    prevHash = serializers.CharField()
    hash = serializers.CharField()

    def to_representation(self, instance) -> dict:
        return entry_representation(instance)


class TenantSerializer(serializers.Serializer):
    """The caller's tenant (docs/api.md#the-tenant)."""

    slug = serializers.CharField()
    rolloutApprovals = serializers.IntegerField(
        source="rollout_approvals",
        min_value=0,
        max_value=MAX_ROLLOUT_APPROVALS,
        help_text="Approvals each new rollout needs from users other than its creator (0: none).",
    )
