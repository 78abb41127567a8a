"""A person signs in to the console through the provider's own page, in Chromium (docs/console.md#signing-in)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tests.browser.conftest import browser_page  # noqa: F401  (the shared Chromium fixture)
from tests.sso.conftest import PASSWORD


def test_sign_in_with_the_provider_in_chromium(console, provider, browser_page):  # noqa: F811
    provider.user("ivan", "sre", "sre-leads")
    page = browser_page
    page.goto(f"{console}/admin/login/?next=/admin/")
    page.click("text=Sign in with Test IdP")
    # The provider's own sign-in page, on the provider's origin.
    page.wait_for_url(f"{provider.issuer.rsplit('/', 1)[0]}/accounts/login/**")
    page.fill("#username", "ivan")
    page.fill("#password", PASSWORD)
    page.click("#sign-in")
    page.wait_for_url(f"{console}/admin/")
    assert "ivan" in page.inner_text("#user-tools").lower()
    assert get_user_model().objects.get(username="ivan").is_staff
