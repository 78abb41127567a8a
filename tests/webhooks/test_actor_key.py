"""A webhook's body names the API key an operator acted through, beside the actor (docs/webhooks.md)."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import Permission
from fleet.services.iam import api_key_create
from rollout.models import Webhook, WebhookDelivery
from rollout.webhooks.deliveries import delivery_claim
from tests.factories import fleet
from tests.rollout.conftest import module_settings, releases  # noqa: F401  (shared fixtures)
from tests.rollout.helpers import create, tick

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("releases")
def test_a_pause_through_a_key_names_the_key_in_the_webhook_body(tenant):
    Webhook.objects.create(
        tenant=tenant, url="http://127.0.0.1:9/hook", events=["rollout.paused"], secret="s", created_at=timezone.now()
    )
    api_key, plain = api_key_create(tenant=tenant, username="ops", grants=[Permission.FLEET_ADMIN], name="deploy")
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant, upgrade_timeout_seconds=600)
    tick(rollout)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert client.post(f"/api/compute/rollouts/{rollout.pk}/pause/").status_code == 200
    delivery = WebhookDelivery.objects.get(event="rollout.paused")
    claimed = delivery_claim(delivery_id=delivery.id, now=timezone.now(), render_rollout=lambda rollout, now: {})
    assert claimed is not None
    body = json.loads(claimed.body)
    assert body["data"] == {
        "pausedReason": "operator",
        "actor": "api:ops",
        "apiKeyId": api_key.pk,
        "apiKeyName": "deploy",
    }
