"""The shapes of "why not yet" (docs/controller.md#why-not-yet): a node row's blocker and a rollout's."""

from __future__ import annotations

from rest_framework import serializers

from rollout.rollouts.blockers import NODE_CODES, ROLLOUT_CODES


class _BlockerSerializer(serializers.Serializer):
    """The fields a node's blocker and a rollout's share: ``code``, ``detail`` and the codes' extra fields."""

    detail = serializers.CharField(help_text="A human sentence.")
    lastTickAt = serializers.DateTimeField(required=False, allow_null=True, help_text="no_controller")
    approvals = serializers.IntegerField(required=False, help_text="awaiting_approval: approvals so far")
    # The metaclass takes declared fields off the class, so this does not shadow Field.required at runtime.
    required = serializers.IntegerField(  # type: ignore[assignment]
        required=False, help_text="awaiting_approval: approvals it needs"
    )
    startAt = serializers.DateTimeField(required=False, help_text="scheduled: when the rollout starts")
    name = serializers.CharField(required=False, help_text="gate: the gate that holds")
    state = serializers.CharField(required=False, help_text="gate: its latest state")
    at = serializers.DateTimeField(required=False, allow_null=True, help_text="gate: when it was taken")
    nextWindowAt = serializers.DateTimeField(required=False, help_text="outside_window")


class NodeBlockerSerializer(_BlockerSerializer):
    """What a node waits for (docs/controller.md#why-not-yet): ``code``, ``detail`` and the code's extra fields."""

    code = serializers.ChoiceField(choices=NODE_CODES)
    pausedReason = serializers.CharField(required=False, help_text="rollout_paused")
    wave = serializers.IntegerField(required=False, help_text="wave_not_started: the current wave")
    until = serializers.DateTimeField(required=False, help_text="soaking, proving_ready")
    lastSeenAt = serializers.DateTimeField(required=False, allow_null=True, help_text="offline")
    poolId = serializers.CharField(required=False, help_text="budget_full")
    disrupted = serializers.IntegerField(required=False, help_text="budget_full")
    allowed = serializers.IntegerField(required=False, help_text="budget_full")
    deadline = serializers.DateTimeField(required=False, help_text="awaiting_rejoin")


class RolloutBlockerSerializer(_BlockerSerializer):
    """What holds a rollout (docs/controller.md#why-not-yet); null while nodes are moving."""

    code = serializers.ChoiceField(choices=ROLLOUT_CODES)
    pausedReason = serializers.CharField(required=False, help_text="paused")
    until = serializers.DateTimeField(required=False, help_text="soaking")
    poolIds = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="outside_window, budget_full"
    )
    inFlight = serializers.IntegerField(required=False, help_text="awaiting_nodes: nodes in flight")
