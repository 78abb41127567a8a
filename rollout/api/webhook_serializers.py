"""Shapes of the webhooks' API (docs/webhooks.md): subscriptions and their deliveries (camelCase).

Types only: the URL, events and secret rules are rollout.webhooks.deliveries.webhook_create's.
"""

from __future__ import annotations

from rest_framework import serializers

from core.fields import StrictCharField, StrictSerializer
from rollout.models import Webhook, WebhookDelivery


class WebhookCreateSerializer(StrictSerializer):
    """Types only; the URL, events and secret rules are rollout.webhooks.deliveries.webhook_create's."""

    url = StrictCharField(max_length=2000, trim_whitespace=False)
    events = serializers.ListField(child=StrictCharField(max_length=64), max_length=len(Webhook.EVENTS) * 2)
    secret = StrictCharField(required=False, max_length=200, trim_whitespace=False)


class WebhookSerializer(serializers.ModelSerializer):
    """A webhook as listed: never its secret."""

    id = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = Webhook
        fields = ["id", "url", "events", "createdAt"]


class WebhookCreatedSerializer(WebhookSerializer):
    """The answer of a create: the only time the secret is shown."""

    class Meta(WebhookSerializer.Meta):
        fields = ["id", "url", "events", "secret", "createdAt"]


class WebhookDeliverySerializer(serializers.ModelSerializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.values)
    lastStatusCode = serializers.IntegerField(source="last_status_code", allow_null=True)
    lastError = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    deliveredAt = serializers.DateTimeField(source="delivered_at", allow_null=True)

    class Meta:
        model = WebhookDelivery
        fields = ["id", "event", "status", "attempts", "lastStatusCode", "lastError", "createdAt", "deliveredAt"]

    def get_lastError(self, delivery: WebhookDelivery) -> str | None:
        return delivery.last_error or None
