"""Every page the project serves works on a network with no internet (docs/operations.md#offline).

Chromium with its network cut to loopback: host names resolve to nothing but 127.0.0.1 and localhost, and
every request is recorded; a request to another host is refused and fails the test. The interactive API
docs (/api/docs/: Swagger UI from drf-spectacular-sidecar's files, served by us) must render, and every
admin page (the index, each model's list, add and change pages) must load with its styles.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import NoReverseMatch, reverse

from rollout.models import Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, WIDTH
from tests.factories import fleet

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}
# Chromium resolves every name to nothing but the loopback ones: no packet leaves the machine.
OFFLINE_ARGS = [*CHROMIUM_ARGS, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]


def admin_pages(rollout: Rollout) -> list[str]:
    """The admin's index, each registered model's list and add page, and a rollout's page."""
    pages = [reverse("admin:index")]
    for model in admin.site._registry:
        meta = model._meta
        for view in ("changelist", "add"):
            try:
                pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}"))
            except NoReverseMatch:
                continue
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk]))
    pages.append(reverse("admin:rollout_rollout_change", args=[rollout.pk]))
    return pages


def test_api_docs_and_every_admin_page_load_nothing_from_another_host(live_server, tenant, releases, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop in this thread

    get_user_model().objects.create_superuser("operator", "op@example.com", "correct horse battery")
    fleet(tenant, {"gpu-a": (4, "0.5")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    pages = admin_pages(rollout)
    outside: list[str] = []
    loaded: list[str] = []

    def guard(route) -> None:
        url = route.request.url
        if urlsplit(url).hostname not in LOOPBACK and not url.startswith(("data:", "blob:")):
            outside.append(url)
            route.abort("internetdisconnected")
            return
        loaded.append(url)
        route.continue_()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=OFFLINE_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.route("**/*", guard)
            page.goto(f"{live_server.url}/api/docs/")
            # Swagger UI rendered the schema: its scripts and styles came from here.
            page.wait_for_selector(".swagger-ui .info .title", timeout=20_000)
            assert "rollout" in page.inner_text(".swagger-ui .info .title")

            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "correct horse battery")
            page.click("input[type=submit]")
            page.wait_for_url(f"{live_server.url}/admin/")
            for path in pages:
                response = page.goto(f"{live_server.url}{path}")
                assert response is not None, path
                assert response.status < 400 or response.status == 403, (path, response.status)
                if response.status == 403:
                    continue  # an add page the admin refuses (rows written only by services): nothing to load
                # The admin's own stylesheet applied: the header is laid out by it.
                assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex", path
        finally:
            browser.close()
            from django.db import connections

            connections.close_all()
    assert outside == [], outside
    assert any("/static/drf_spectacular_sidecar/" in url for url in loaded)
    assert len(pages) > 10
