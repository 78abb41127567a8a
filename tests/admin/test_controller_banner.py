"""The admin says when no controller runs (docs/controller.md#no-controller): a banner naming both commands."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from tests.admin.conftest import make_rollout
from tests.rollout.helpers import tick

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/rollout/"


def banner(response) -> str | None:
    found = [str(message) for message in response.context["messages"] if "No controller" in str(message)]
    return found[0] if found else None


def test_a_banner_names_the_worker_and_beat_commands_once_a_rollout_waits_for_a_tick(root, tenant, releases):
    rollout = make_rollout(tenant, {"a": (2, "1")})
    assert banner(root.get(LIST)) is None  # just created: not yet late
    later = timezone.now() + timedelta(seconds=91)
    with time_machine.travel(later, tick=False):
        for url in (LIST, f"{LIST}{rollout.id}/change/", "/admin/"):  # the admin's front page too
            text = banner(root.get(url))
            assert text is not None, url
            assert "celery -A project worker" in text
            assert "celery -A project beat --scheduler django_celery_beat.schedulers:DatabaseScheduler" in text
        tick(rollout)
        assert banner(root.get(LIST)) is None  # a tick ran: the controller is back
        assert banner(root.get("/admin/")) is None
