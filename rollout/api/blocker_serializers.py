"""The shapes of "why not yet" (docs/controller.md#why-not-yet): a node row's blocker and a rollout's."""

from __future__ import annotations

from rest_framework import serializers

from rollout.controller.decisions import NODE_CODES, ROLLOUT_CODES, Code


class _BlockerSerializer(serializers.Serializer):
    """The fields a node's blocker and a rollout's share: ``code``, ``detail`` and the codes' extra fields."""

    detail = serializers.CharField(help_text="A human sentence.")
    lastTickAt = serializers.DateTimeField(required=False, allow_null=True, help_text=Code.NO_CONTROLLER)
    approvals = serializers.IntegerField(required=False, help_text=f"{Code.AWAITING_APPROVAL}: approvals so far")
    # The metaclass takes declared fields off the class, so this does not shadow Field.required at runtime.
    required = serializers.IntegerField(  # type: ignore[assignment]
        required=False, help_text=f"{Code.AWAITING_APPROVAL}: approvals it needs"
    )
    startAt = serializers.DateTimeField(required=False, help_text=f"{Code.SCHEDULED}: when the rollout starts")
    name = serializers.CharField(required=False, help_text=f"{Code.GATE}: the gate that holds")
    state = serializers.CharField(required=False, help_text=f"{Code.GATE}: its latest state")
    at = serializers.DateTimeField(required=False, allow_null=True, help_text=f"{Code.GATE}: when it was taken")
    nextWindowAt = serializers.DateTimeField(required=False, help_text=Code.OUTSIDE_WINDOW)


class NodeBlockerSerializer(_BlockerSerializer):
    """What a node waits for (docs/controller.md#why-not-yet): ``code``, ``detail`` and the code's extra fields."""

    code = serializers.ChoiceField(choices=NODE_CODES)
    pausedReason = serializers.CharField(required=False, help_text=Code.ROLLOUT_PAUSED)
    wave = serializers.IntegerField(required=False, help_text=f"{Code.WAVE_NOT_STARTED}: the current wave")
    until = serializers.DateTimeField(required=False, help_text=f"{Code.SOAKING}, {Code.PROVING_READY}")
    lastSeenAt = serializers.DateTimeField(required=False, allow_null=True, help_text=Code.OFFLINE)
    poolId = serializers.CharField(required=False, help_text=Code.BUDGET_FULL)
    disrupted = serializers.IntegerField(required=False, help_text=Code.BUDGET_FULL)
    allowed = serializers.IntegerField(required=False, help_text=Code.BUDGET_FULL)
    deadline = serializers.DateTimeField(required=False, help_text=Code.AWAITING_REJOIN)


class RolloutBlockerSerializer(_BlockerSerializer):
    """What holds a rollout (docs/controller.md#why-not-yet); null while nodes are moving."""

    code = serializers.ChoiceField(choices=ROLLOUT_CODES)
    pausedReason = serializers.CharField(required=False, help_text=Code.PAUSED)
    until = serializers.DateTimeField(required=False, help_text=Code.SOAKING)
    poolIds = serializers.ListField(
        child=serializers.CharField(), required=False, help_text=f"{Code.OUTSIDE_WINDOW}, {Code.BUDGET_FULL}"
    )
    inFlight = serializers.IntegerField(required=False, help_text=f"{Code.AWAITING_NODES}: nodes in flight")
