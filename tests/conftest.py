"""Fixtures shared by every test area. Area-specific ones live in tests/<area>/conftest.py."""

from __future__ import annotations

import pytest
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from fleet.models import Permission, Tenant
from fleet.services.iam import api_key_create, tenant_create

# The suite runs on two shared cores beside real servers: a property test's inputs may be drawn slowly there
# (a health check about the machine's load, not the strategy), and an example's time says nothing.
hypothesis_settings.register_profile("shared-machine", suppress_health_check=[HealthCheck.too_slow], deadline=None)
hypothesis_settings.load_profile("shared-machine")


@pytest.fixture(autouse=True)
def _fresh_pulse_throttle(monkeypatch):
    """Each test starts with this process's fleet-pulse throttle unset (it is per process, not per test)."""
    from fleet.services import liveness

    monkeypatch.setattr(liveness, "_last_written_at", None)


@pytest.fixture(autouse=True)
def _api_requests_not_heard():
    """An API request does not write the fleet's pulse here (fleet/api/heard.py), so that the statements a request
    runs are counted alike whenever it comes; tests/rollout/test_hardening.py turns it on where it is the subject.
    (``override_settings``, not pytest-django's ``settings``: some modules have a fixture of that name.)"""
    with override_settings(FLEET_HEARD_BY_API=False):
        yield


@pytest.fixture(autouse=True)
def _key_use_not_recorded():
    """An API request does not write its key's ``lastUsedAt`` here (at most once a minute: fleet/services/apikeys.py),
    so that a request's statements are counted alike whenever it comes; tests/iam/test_apikeys.py turns it on."""
    with override_settings(API_KEY_LAST_USED=False):
        yield


@pytest.fixture(autouse=True)
def _fresh_root_version(monkeypatch):
    """Each test starts with this process's cached root version unset (it is per process, not per test)."""
    from rollout.registry import roots

    monkeypatch.setattr(roots, "_cached_version", None)


@pytest.fixture
def tenant(db) -> Tenant:
    return tenant_create(slug="acme")


@pytest.fixture
def other_tenant(db) -> Tenant:
    return tenant_create(slug="globex")


def client_for(tenant: Tenant, username: str, *, admin: bool = True) -> APIClient:
    """An API client holding a fresh key of ``username`` in ``tenant``."""
    grants = [Permission.FLEET_ADMIN] if admin else []
    _, plain = api_key_create(tenant=tenant, username=username, grants=grants)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def api(tenant) -> APIClient:
    """A client with compute:fleet:admin on ``tenant``'s fleet scope."""
    return client_for(tenant, "ops")


@pytest.fixture
def other_api(other_tenant) -> APIClient:
    """A fleet admin of another tenant."""
    return client_for(other_tenant, "intruder")


@pytest.fixture
def ungranted_api(tenant) -> APIClient:
    """A valid key of ``tenant`` without the grant."""
    return client_for(tenant, "viewer", admin=False)


@pytest.fixture
def anonymous_api() -> APIClient:
    return APIClient()
