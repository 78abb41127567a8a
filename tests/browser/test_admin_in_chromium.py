"""A real browser (Debian's Chromium, headless, driven by Playwright) pauses a running rollout in the admin.

Screenshots go to a temporary folder; with UPDATE_SCREENSHOTS=1 they replace docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from rollout.controller.tick import rollout_tick
from rollout.models import Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
# The probe's flags: no sandbox as root, and no background traffic off this machine.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser_page(tmp_path, monkeypatch):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    # Playwright's sync API runs an event loop in this thread; only for this test (a leak fails check --deploy).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            yield page
        finally:
            browser.close()
            # While Playwright's event loop runs in this thread, the test's ORM calls get database
            # connections of their own (asgiref's context-local storage): close them here, or the
            # test database cannot be dropped at the end of the session.
            connections.close_all()


def test_an_operator_pauses_a_running_rollout_in_the_admin(live_server, browser_page, tenant, releases, tmp_path):
    get_user_model().objects.create_superuser("operator", "op@example.com", "correct horse battery")
    fleet(tenant, {"gpu-a": (40, "0.5"), "gpu-b": (20, "0.5")})  # budgets of 20 and 10: wave 0 always fits
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[10, 50, 100], soak_seconds=60))
    rollout_tick(rollout_id=rollout.id)  # the first wave (6 nodes) fits both budgets: all in flight
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = browser_page

    page.goto(f"{live_server.url}/admin/login/?next=/admin/rollout/rollout/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse battery")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    assert "1.0.0" in page.inner_text("#result_list")
    page.screenshot(path=str(shots / "rollout-list.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/rollout/rollout/{rollout.id}/change/")
    assert page.inner_text(".rollout-state") == "active"
    assert "6 in flight" in page.inner_text("#rollout-waves")
    page.screenshot(path=str(shots / "rollout-detail.png"), full_page=True)

    page.click("a.rollout-action:has-text('Pause')")
    page.wait_for_selector("input[type=submit][value^='Yes']")
    page.screenshot(path=str(shots / "rollout-pause-confirm.png"), full_page=True)
    page.click("input[type=submit][value^='Yes']")
    page.wait_for_selector(".rollout-state-paused")
    assert page.inner_text(".rollout-state") == "paused"
    page.screenshot(path=str(shots / "rollout-paused.png"), full_page=True)

    rollout.refresh_from_db()
    assert (rollout.state, rollout.paused_reason) == (Rollout.State.PAUSED, Rollout.PausedReason.OPERATOR)
    assert rollout.events.filter(kind="rollout.paused", data__actor="admin:operator").exists()
    assert all(path.stat().st_size > 10_000 for path in shots.iterdir())
    if os.environ.get("UPDATE_SCREENSHOTS"):
        for path in shots.iterdir():
            shutil.copy(path, DOCS / path.name)
