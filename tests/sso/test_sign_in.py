"""Single sign-on end to end (docs/operations.md#single-sign-on), against a real provider in a second process."""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.utils import timezone

from fleet.models import AuditEntry, Grant, Membership, Permission
from tests.sso.conftest import CLIENT_ID, CLIENT_SECRET, sign_in, signed_in_to_console


def grants_of(username: str) -> set[tuple[str, str]]:
    return set(Grant.objects.filter(user__username=username).values_list("tenant__slug", "permission"))


def test_first_sign_in_creates_the_user_with_the_grants_of_their_groups(console, provider):
    provider.user("alice", "sre", "sre-leads", "unmapped")
    http, page = sign_in(console, "alice")
    assert page.status_code == 200, page.text[:800]
    assert str(page.url) == f"{console}/admin/"
    assert "alice" in page.text
    user = get_user_model().objects.get(username="alice")
    assert user.is_staff
    assert not user.is_superuser
    assert not user.has_usable_password()
    assert user.email == "alice@example.com"
    assert Membership.objects.get(user=user).tenant.slug == "acme"
    assert grants_of("alice") == {("acme", Permission.FLEET_ADMIN), ("acme", Permission.ROLLOUT_APPROVE)}
    assert user.has_perm("rollout.change_rollout")
    assert user.has_perm("fleet.view_grant")
    assert not user.has_perm("fleet.change_grant")  # the provider decides grants, not the console
    entry = AuditEntry.objects.get(action="user.sso_sign_in")
    assert entry.tenant.slug == "acme"
    assert entry.actor_user == "alice"
    assert entry.after["groups"] == ["sre", "sre-leads", "unmapped"]
    # The session ends OIDC_SESSION_MAX_AGE (600 s) after the sign-in at the latest.
    session = Session.objects.get()
    assert session.expire_date <= timezone.now() + timedelta(seconds=600)
    assert session.expire_date > timezone.now() + timedelta(seconds=500)
    assert signed_in_to_console(http, console)
    # Active or not, the session is over once OIDC_SESSION_MAX_AGE has passed (the clock moved on).
    with time_machine.travel(timezone.now() + timedelta(seconds=540), tick=False):
        assert signed_in_to_console(http, console)
    with time_machine.travel(timezone.now() + timedelta(seconds=601), tick=False):
        assert not signed_in_to_console(http, console)


def test_a_group_removed_at_the_provider_removes_the_access_at_the_next_sign_in(console, provider):
    provider.user("bob", "sre", "sre-leads")
    first, page = sign_in(console, "bob")
    assert str(page.url) == f"{console}/admin/"
    assert grants_of("bob") == {("acme", Permission.FLEET_ADMIN), ("acme", Permission.ROLLOUT_APPROVE)}

    provider.user("bob", "sre")
    _, page = sign_in(console, "bob")
    assert str(page.url) == f"{console}/admin/"
    assert grants_of("bob") == {("acme", Permission.FLEET_ADMIN)}

    provider.user("bob")
    second, page = sign_in(console, "bob")
    assert page.status_code == 403
    assert "none of your groups" in page.text
    assert 'data-reason="no_access"' in page.text
    assert grants_of("bob") == set()
    bob = get_user_model().objects.get(username="bob")
    assert not bob.is_staff
    assert not Membership.objects.filter(user=bob).exists()
    assert not signed_in_to_console(second, console)
    # The session opened before is of no use any more either: the user is no longer staff.
    assert not signed_in_to_console(first, console)
    assert AuditEntry.objects.filter(action="user.sso_access_removed").exists()
    assert AuditEntry.objects.get(action="user.sso_refused").after["reason"] == "no_access"


def test_a_user_whose_groups_give_nothing_is_refused_and_not_created(console, provider):
    provider.user("carol", "marketing")
    http, page = sign_in(console, "carol")
    assert page.status_code == 403
    assert "marketing" in page.text
    assert not get_user_model().objects.filter(username="carol").exists()
    assert not signed_in_to_console(http, console)


def test_oidc_redirect_uri_is_the_redirect_uri_both_legs_name(console, provider, settings):
    """Behind a proxy that terminates TLS the request's own URL is wrong: OIDC_REDIRECT_URI is what counts.
    (The provider compares redirect URIs exactly: one with a query the request could not have built.)"""
    settings.OIDC_REDIRECT_URI = f"{console}/admin/sso/callback/?via=setting"
    provider.tool("client", CLIENT_ID, CLIENT_SECRET, settings.OIDC_REDIRECT_URI)
    provider.user("heidi", "sre")
    http, page = sign_in(console, "heidi")
    assert str(page.url) == f"{console}/admin/"
    assert signed_in_to_console(http, console)
