"""The admin's rollout page shows each gate with its state, value and time (docs/controller.md#gates)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from django.utils.formats import localize

from rollout.controller.gate_evaluation import gate_record
from rollout.gates.probe import Outcome
from rollout.models import RolloutGate
from tests.factories import fleet
from tests.gates.test_evaluate import create, prom

pytestmark = pytest.mark.django_db


def test_the_rollout_page_shows_each_gate(tenant, releases, module_settings, serve):
    module_settings.ROLLOUT_PROMETHEUS_URL = "http://127.0.0.1:9"
    health = serve(status=200)
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant, prom(maximum=5), {"name": "health", "http": {"url": health.url + "/ok"}}, limit=4)
    at = timezone.now()
    gate_record(gate_id=RolloutGate.objects.get(name="errors").id, outcome=Outcome("fail", 7.25, "1 sample(s)"), now=at)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", None))
    body = client.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    assert 'id="rollout-gates"' in body
    assert "<code>errors</code> &le; 5.0" in body
    assert f"<code>GET {health.url}/ok</code>" in body
    assert 'rollout-gate-fail">fail</span>' in body
    assert "7.25" in body
    assert localize(timezone.localtime(at)) in body
    assert "1 / 4" in body  # failures in a row, of the limit
    assert 'rollout-gate-pending">pending</span>' in body
    assert "held by gate errors (fail)" in body
