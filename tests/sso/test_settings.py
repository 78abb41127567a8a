"""SSO settings: the role map's parser, the system checks (sso.E001-E005, sso.W001), the login page and
``ADMIN_PASSWORD_LOGIN=0`` (no provider needed: nothing here reaches it)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.models import Permission
from fleet.sso.checks import check_role_map_tenants, check_sso_settings
from fleet.sso.config import RoleRule, parse_role_map

SSO = {"OIDC_ISSUER_URL": "https://sso.example.com/realms/ops", "OIDC_CLIENT_ID": "rollout", "OIDC_CLIENT_SECRET": "s"}


def test_the_role_map_parses_group_tenant_permission():
    assert parse_role_map(" sre=acme:compute:fleet:admin, /ops/leads = acme:compute:rollout:approve,") == (
        RoleRule("sre", "acme", Permission.FLEET_ADMIN),
        RoleRule("/ops/leads", "acme", Permission.ROLLOUT_APPROVE),
    )
    assert parse_role_map("") == ()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("sre", "is not group=tenant:permission"),
        ("=acme:compute:fleet:admin", "is not group=tenant:permission"),
        ("sre=compute", "is not group=tenant:permission"),
        ("sre=acme:compute:fleet:root", "unknown permission 'compute:fleet:root'"),
        ("sre=ac me:compute:fleet:admin", "is not a tenant slug"),
    ],
)
def test_a_role_map_entry_that_does_not_parse_is_named(settings, text, words):
    with pytest.raises(ValueError, match=words):
        parse_role_map(text)
    settings.OIDC_ROLE_MAP = text
    (error,) = check_sso_settings()
    assert error.id == "sso.E002"
    assert words in error.msg


def ids(settings, **values) -> list[str]:
    for name, value in values.items():
        setattr(settings, name, value)
    return [message.id for message in check_sso_settings()]


def test_the_checks(settings):
    assert ids(settings) == []
    assert ids(settings, **SSO) == []
    assert ids(settings, OIDC_CLIENT_SECRET="") == ["sso.E001"]  # half configured
    assert ids(settings, OIDC_CLIENT_SECRET="s", OIDC_SESSION_MAX_AGE="8h") == ["sso.E003"]
    assert ids(settings, OIDC_SESSION_MAX_AGE=30) == ["sso.E003"]
    assert ids(settings, OIDC_SESSION_MAX_AGE=3600, OIDC_ISSUER_URL="http://sso.example.com") == ["sso.E005"]
    assert ids(settings, OIDC_ISSUER_URL="http://127.0.0.1:8080/o") == []  # a local test provider
    assert ids(settings, ADMIN_PASSWORD_LOGIN=False) == []
    assert ids(settings, OIDC_ISSUER_URL="", OIDC_CLIENT_ID="", OIDC_CLIENT_SECRET="") == ["sso.E004"]


def test_a_role_map_naming_a_missing_tenant_is_a_warning(settings, tenant):
    settings.OIDC_ROLE_MAP = "sre=acme:compute:fleet:admin,ops=initech:compute:fleet:admin"
    assert check_role_map_tenants(databases=None) == []  # only when the checks may read the database
    (warning,) = check_role_map_tenants(databases=["default"])
    assert warning.id == "sso.W001"
    assert "'initech'" in warning.msg


@pytest.fixture
def local_root(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "a-local-password-1")


@pytest.mark.usefixtures("local_root")
def test_the_login_page_offers_sso_beside_the_password_form(settings):
    for name, value in SSO.items():
        setattr(settings, name, value)
    settings.OIDC_NAME = "Keycloak"
    page = Client().get("/admin/login/?next=/admin/")
    assert "Sign in with Keycloak" in page.text
    assert 'href="/admin/sso/start/?next=/admin/"' in page.text
    assert 'id="login-form"' in page.text
    client = Client()
    answer = client.post("/admin/login/?next=/admin/", {"username": "root", "password": "a-local-password-1"})
    assert answer.status_code == 302
    assert client.get("/admin/").status_code == 200


@pytest.mark.usefixtures("local_root")
def test_without_sso_the_login_page_is_the_password_form_alone():
    page = Client().get("/admin/login/")
    assert "Sign in with" not in page.text
    assert 'id="login-form"' in page.text
    assert Client().get("/admin/sso/start/").status_code == 404


@pytest.mark.usefixtures("local_root")
def test_admin_password_login_off_refuses_a_local_password(settings):
    for name, value in SSO.items():
        setattr(settings, name, value)
    settings.OIDC_NAME = "Keycloak"
    settings.ADMIN_PASSWORD_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = ["fleet.sso.backend.ConsoleOIDCBackend"]  # as project/settings.py makes it
    page = Client().get("/admin/login/")
    assert "Sign in with Keycloak" in page.text
    assert 'id="login-form"' not in page.text
    client = Client()
    answer = client.post("/admin/login/?next=/admin/", {"username": "root", "password": "a-local-password-1"})
    assert answer.status_code == 403
    assert "Local passwords are turned off" in answer.text
    assert client.get("/admin/").status_code == 302  # not signed in
    # Nor through Django's own authenticate() (the backend signs in only from the provider's callback).
    from django.contrib.auth import authenticate

    assert authenticate(None, username="root", password="a-local-password-1") is None
