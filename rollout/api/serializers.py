"""Shapes of the rollout module's API (camelCase, CONTRACT 4.3 to 4.5).

Input serializers only check types; the rules (waves, ratios, seconds) are
checked once, in rollout/services/plan.py, for the API and the admin alike.
"""

from __future__ import annotations

from rest_framework import serializers

from project.fleet.api.fields import StrictBooleanField, StrictIntegerField, StrictNumberField, StrictSerializer
from rollout import conf
from rollout.models import NodeUpgrade, Release, Rollout, RolloutEvent


class ReleaseSerializer(serializers.ModelSerializer):
    protocolVersion = serializers.IntegerField(source="protocol_version", allow_null=True)
    registeredAt = serializers.DateTimeField(source="registered_at")
    binaries = serializers.SerializerMethodField()

    class Meta:
        model = Release
        fields = ["version", "sequence", "product", "protocolVersion", "binaries", "registeredAt"]

    def get_binaries(self, release: Release) -> dict[str, dict]:
        return {
            binary.platform: {
                "sha256": binary.sha256,
                "size": binary.size,
                "url": conf.binary_url(release.version, binary.platform),
            }
            for binary in release.binaries.all()
        }


class RolloutCreateSerializer(StrictSerializer):
    version = serializers.CharField(max_length=64)
    poolIds = serializers.ListField(child=serializers.CharField(max_length=64), required=False, allow_empty=False)
    waves = serializers.ListField(child=StrictNumberField(), required=False, allow_empty=False, max_length=20)
    maxFailureRatio = StrictNumberField(required=False)
    soakSeconds = StrictIntegerField(required=False)
    upgradeTimeoutSeconds = StrictIntegerField(required=False)

    def service_kwargs(self) -> dict:
        data = self.validated_data
        return {
            "version": data["version"],
            "pool_ids": data.get("poolIds"),
            "waves": data.get("waves"),
            "max_failure_ratio": data.get("maxFailureRatio"),
            "soak_seconds": data.get("soakSeconds"),
            "upgrade_timeout_seconds": data.get("upgradeTimeoutSeconds"),
        }


class AbortSerializer(StrictSerializer):
    rollback = StrictBooleanField(required=False, default=False)


class RolloutSerializer(serializers.ModelSerializer):
    """CONTRACT 4.5. ``waves`` come from the view's context (rollout.selectors.rollout_waves)."""

    id = serializers.CharField()
    version = serializers.CharField(source="release.version")
    poolIds = serializers.SerializerMethodField()
    waves = serializers.SerializerMethodField()
    currentWave = serializers.IntegerField(source="current_wave")
    maxFailureRatio = serializers.FloatField(source="max_failure_ratio")
    soakSeconds = serializers.IntegerField(source="soak_seconds")
    upgradeTimeoutSeconds = serializers.IntegerField(source="upgrade_timeout_seconds")
    pausedReason = serializers.CharField(source="paused_reason", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")
    completedAt = serializers.DateTimeField(source="completed_at", allow_null=True)

    class Meta:
        model = Rollout
        fields = [
            "id",
            "version",
            "state",
            "poolIds",
            "waves",
            "currentWave",
            "maxFailureRatio",
            "soakSeconds",
            "upgradeTimeoutSeconds",
            "pausedReason",
            "createdAt",
            "completedAt",
        ]

    def get_poolIds(self, rollout: Rollout) -> list[str]:
        return sorted(str(pool.id) for pool in rollout.pools.all())

    def get_waves(self, rollout: Rollout) -> list[dict]:
        waves = self.context["waves"].get(rollout.id, [])
        return [{**wave, "startedAt": _iso(wave["startedAt"]), "settledAt": _iso(wave["settledAt"])} for wave in waves]


def _iso(value):
    return serializers.DateTimeField().to_representation(value) if value else None


class NodeUpgradeSerializer(serializers.ModelSerializer):
    nodeId = serializers.CharField(source="node_id")
    poolId = serializers.CharField(source="pool_id")
    previousVersion = serializers.CharField(source="previous_version", allow_null=True)
    startedAt = serializers.DateTimeField(source="started_at", allow_null=True)
    settledAt = serializers.DateTimeField(source="settled_at", allow_null=True)

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
        ]


class RolloutEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RolloutEvent
        fields = ["kind", "at", "data"]
