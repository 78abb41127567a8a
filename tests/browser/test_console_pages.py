"""The console's pages in a real Chromium at 1,400 px (docs/console.md's screenshots): an operator plans a
rollout and confirms it, finds what its nodes wait for, opens a node, uploads a release's binary, and meets
the console's own 403 page. Nothing on any of them is wider than the screen."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fleet.models import Membership, Node
from rollout.controller.tick import rollout_tick
from rollout.models import ReleaseBinary, Rollout
from rollout.registry.releases import release_register
from tests.browser.conftest import keep_screenshots, log_in, overflowing, shoot
from tests.factories import binary_bytes, fleet, manifest, signed

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery"


def test_an_operator_plans_finds_and_uploads_in_the_console(
    live_server, browser_page, tenant, releases, screenshots, tmp_path
):
    get_user_model().objects.create_superuser("operator", "op@example.com", PASSWORD)
    # Budgets of 2 and 1 against a first wave of 20 nodes: most of it waits for the budget.
    fleet(tenant, {"gpu-a": (24, "0.1"), "gpu-b": (16, "0.1")})
    Node.objects.filter(name="gpu-a-00003").update(labels={"ring": "canary", "rack": "r12", "zone": "eu-west-3b"})
    page = browser_page
    base = live_server.url
    log_in(page, base, "operator", PASSWORD)

    # Plan: the form, then its preview (writes nothing), then the confirmation creates the rollout.
    page.goto(f"{base}/admin/rollout/rollout/add/")
    page.select_option("#id_tenant", label=tenant.slug)
    page.fill("#id_waves", "50,100")
    page.fill("#id_soak_seconds", "60")
    shoot(page, screenshots, "rollout-plan.png")
    page.click("input[name=_preview]")
    page.wait_for_selector("#rollout-plan-waves")
    assert "Nothing has been written yet" in page.inner_text("#content-main")
    assert Rollout.objects.count() == 0
    shoot(page, screenshots, "rollout-plan-preview.png")
    page.click("input[name=_confirm]")
    page.wait_for_selector(".rollout-state")
    assert overflowing(page) == []  # its long subtitle ("rollout <uuid> of 1.0.0 (active)") beside its actions
    rollout = Rollout.objects.get()
    rollout_tick(rollout_id=rollout.id)  # 3 of the first wave start, the rest wait for their pool's budget

    # What each node of the rollout waits for, in words that fit their column.
    page.goto(f"{base}/admin/rollout/nodeupgrade/?rollout={rollout.pk}&state__exact=pending")
    assert "Budget full in gpu-a: 3 of 3 nodes disrupted." in page.inner_text("#result_list")
    shoot(page, screenshots, "node-upgrades-waiting.png")

    # A node: its labels, its current rollout and its history; no Delete while its agent holds a session.
    node = Node.objects.get(name="gpu-a-00003")
    page.goto(f"{base}/admin/fleet/node/{node.pk}/change/")
    assert "current rollout: 1.0.0" in page.inner_text("#content-main")
    assert page.query_selector(".deletelink") is None
    assert overflowing(page) == []  # docs/console.md's node.png: test_console_widths.py, on a real fleet

    # A release registered without its binary: uploaded from its page, checked against the signed manifest.
    release = release_register(envelope=signed(manifest("2.0.0", 3, archs=("amd64",)))).release
    binary = tmp_path / "bcd-linux-amd64"
    binary.write_bytes(binary_bytes("2.0.0", "amd64"))
    page.goto(f"{base}/admin/rollout/release/{release.pk}/change/")
    page.set_input_files("#release-binary-upload-form input[type=file]", str(binary))
    page.click("#release-binary-upload-form input[type=submit]")
    page.wait_for_selector(".messagelist .success")
    assert ReleaseBinary.objects.get(release=release).stored_at is not None
    shoot(page, screenshots, "release-binary-upload.png")

    # A staff user without the grant every write needs: the console's own 403 page, in its layout.
    clerk = get_user_model().objects.create_user("clerk", password=PASSWORD, is_staff=True)
    Membership.objects.create(user=clerk, tenant=tenant)
    page.context.clear_cookies()
    log_in(page, base, "clerk", PASSWORD)
    response = page.goto(f"{base}/admin/rollout/rollout/add/")
    assert response is not None
    assert response.status == 403
    assert page.inner_text("h1") == "Permission denied"
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex"
    shoot(page, screenshots, "permission-denied.png")

    keep_screenshots(
        screenshots,
        {
            "rollout-plan.png",
            "rollout-plan-preview.png",
            "node-upgrades-waiting.png",
            "release-binary-upload.png",
            "permission-denied.png",
        },
    )
