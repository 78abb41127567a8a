"""Fixtures of the admin tests: a superuser, a staff user of one tenant, releases and rollouts."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission as AuthPermission
from django.test import Client

from fleet.models import Membership, Permission, Tenant
from fleet.services.iam import grant_add
from rollout.models import Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.conftest import module_settings, releases  # noqa: F401  (shared fixtures)


@pytest.fixture
def root(db) -> Client:
    """A client logged in as a superuser (all tenants)."""
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", None))
    return client


def staff_client(
    tenant: Tenant,
    username: str = "staff",
    *,
    codenames: tuple[str, ...] | None = None,
    app_labels: tuple[str, ...] = ("rollout",),
    fleet_admin: bool = True,
) -> Client:
    """A client of a staff user of ``tenant`` with the apps' model permissions (or only ``codenames``) and,
    unless ``fleet_admin=False``, the IAM grant ``compute:fleet:admin`` that every write needs."""
    user = get_user_model().objects.create_user(username, password=None, is_staff=True)
    Membership.objects.create(user=user, tenant=tenant)
    if fleet_admin:
        grant_add(tenant=tenant, user=user, permission=Permission.FLEET_ADMIN)
    perms = AuthPermission.objects.filter(content_type__app_label__in=app_labels)
    if codenames is not None:
        perms = perms.filter(codename__in=codenames)
    user.user_permissions.set(perms)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff(tenant) -> Client:
    return staff_client(tenant)


def make_rollout(tenant: Tenant, pools: dict[str, tuple[int, str]], **options) -> Rollout:
    """A fleet of ``pools`` in ``tenant`` and a rollout of 1.0.0 over those pools."""
    made = fleet(tenant, pools)
    pool_ids = [nodes[0].pool_id for nodes in made.values()]
    return rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", pool_ids=pool_ids, **options))
