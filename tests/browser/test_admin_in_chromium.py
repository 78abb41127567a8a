"""A real browser (Debian's Chromium, headless, driven by Playwright) pauses a running rollout in the admin,
and the rollouts' pages fit a 1,400-px screen (docs/console.md's screenshots)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from rollout.controller.tick import rollout_tick
from rollout.models import Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.browser.conftest import keep_screenshots, log_in, overflowing, shoot
from tests.factories import fleet

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_operator_pauses_a_running_rollout_in_the_admin(live_server, browser_page, tenant, releases, screenshots):
    get_user_model().objects.create_superuser("operator", "op@example.com", "correct horse battery")
    fleet(tenant, {"gpu-a": (40, "0.5"), "gpu-b": (20, "0.5")})  # budgets of 20 and 10: wave 0 always fits
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[10, 50, 100], soak_seconds=60))
    rollout_tick(rollout_id=rollout.id)  # the first wave (6 nodes) fits both budgets: all in flight
    page = browser_page

    log_in(page, live_server.url, "operator", "correct horse battery", then="/admin/rollout/rollout/")
    assert "1.0.0" in page.inner_text("#result_list")
    assert overflowing(page) == []  # docs/console.md's rollout-list.png: test_console_widths.py, on a real fleet

    page.goto(f"{live_server.url}/admin/rollout/rollout/{rollout.id}/change/")
    assert page.inner_text(".rollout-state") == "active"
    assert "6 in flight" in page.inner_text("#rollout-waves")
    assert overflowing(page) == []  # the wave table fits at 1,400 px (its screenshot: test_console_widths.py)

    page.click("a.rollout-action:has-text('Pause')")
    page.wait_for_selector("input[type=submit][value^='Yes']")
    shoot(page, screenshots, "rollout-pause-confirm.png")
    page.click("input[type=submit][value^='Yes']")
    page.wait_for_selector(".rollout-state-paused")
    assert page.inner_text(".rollout-state") == "paused"
    shoot(page, screenshots, "rollout-paused.png")

    rollout.refresh_from_db()
    assert (rollout.state, rollout.paused_reason) == (Rollout.State.PAUSED, Rollout.PausedReason.OPERATOR)
    assert rollout.events.filter(kind="rollout.paused", data__actor="admin:operator").exists()
    keep_screenshots(screenshots, {"rollout-pause-confirm.png", "rollout-paused.png"})
