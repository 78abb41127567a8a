"""Every page docs/console.md shows, on a fleet like a real one (tests/browser/realistic.py), fits 1,400 and
1,000 px with Django's sidebar open: no sideways scroll, no table wider than its box, no clipped cell, no action
button over a heading (issue 51, item 3)."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import keep_screenshots, log_in, overflowing, shoot_top
from tests.browser.realistic import PASSWORD, realistic_fleet

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 1000)


def pages(data) -> list[tuple[str, str]]:
    rollout = "/admin/rollout/rollout"
    return [
        ("index", "/admin/"),
        ("rollout list", f"{rollout}/"),
        ("running rollout", f"{rollout}/{data.running.pk}/change/"),
        ("paused rollout", f"{rollout}/{data.paused.pk}/change/"),
        ("scheduled rollout", f"{rollout}/{data.scheduled.pk}/change/"),
        ("rollout awaiting approval", f"{rollout}/{data.awaiting.pk}/change/"),
        ("pause confirmation", f"{rollout}/{data.running.pk}/pause/"),
        ("approve page", f"{rollout}/{data.awaiting.pk}/approve/"),
        ("plan form", f"{rollout}/add/"),
        ("node upgrades", f"/admin/rollout/nodeupgrade/?rollout={data.running.pk}"),
        ("node list", "/admin/fleet/node/"),
        ("node page", f"/admin/fleet/node/{data.node.pk}/change/"),
        ("release list", "/admin/rollout/release/"),
        ("release page", f"/admin/rollout/release/{data.release.pk}/change/"),
        ("pool list", "/admin/fleet/pool/"),
    ]


# docs/console.md's screenshots of this data: (width, page's name) -> file.
SCREENSHOTS = {
    (1400, "index"): "overview.png",
    (1400, "rollout list"): "rollout-list.png",
    (1400, "running rollout"): "rollout-detail.png",
    (1400, "rollout awaiting approval"): "rollout-awaiting-approval.png",
    (1400, "node list"): "node-list.png",
    (1400, "node page"): "node.png",
    (1000, "running rollout"): "rollout-detail-1000.png",
    (1000, "node list"): "node-list-1000.png",
}


def test_every_page_fits_1400_and_1000_px_with_the_sidebar_open(
    live_server, browser_page, tenant, releases, module_settings, screenshots
):
    module_settings.FLEET_HEARTBEAT_SECONDS = 3600  # the agents that heartbeated at the start stay online
    data = realistic_fleet(tenant)
    page = browser_page
    log_in(page, live_server.url, "operator", PASSWORD)
    found: dict[str, list[str]] = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages(data):
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None, name
            assert response.status == 200, (name, response.status)
            # Django's default: the sidebar open (the index has none: its body is the same list)
            assert path == "/admin/" or page.is_visible("#nav-sidebar"), name
            problems = overflowing(page)
            if not problems and (width, name) in SCREENSHOTS:
                shoot_top(page, screenshots, SCREENSHOTS[width, name])
            if os.environ.get("CONSOLE_SHOTS"):  # a folder to look at every page in (not the docs' screenshots)
                page.screenshot(
                    path=f"{os.environ['CONSOLE_SHOTS']}/{width}-{name.replace(' ', '-')}.png",
                    full_page=True,
                    clip={"x": 0, "y": 0, "width": width, "height": 1300},
                )
            if problems:
                found[f"{name} at {width} px"] = problems
        # The plan's preview, from the form (it writes nothing).
        page.goto(f"{live_server.url}/admin/rollout/rollout/add/")
        page.select_option("#id_tenant", label=data.tenant.slug)
        page.check(f"#id_pools input[value='{data.free_pool.pk}']")
        page.fill("#id_waves", "5,25,50,100")
        page.click("input[name=_preview]")
        page.wait_for_selector("#rollout-plan-waves")
        if problems := overflowing(page):
            found[f"plan preview at {width} px"] = problems
    assert found == {}, "\n".join(f"{where}: {problems}" for where, problems in found.items())
    keep_screenshots(screenshots, set(SCREENSHOTS.values()))
