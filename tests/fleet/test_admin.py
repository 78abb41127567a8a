"""The operators' console: tenant scoping, budgets in the pool list, actions through services."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission as AuthPermission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import ApiKey, Membership, Node, Permission, Workflow
from fleet.services.iam import api_key_create, grant_add
from fleet.services.workflows import workflow_start
from tests.fleet.conftest import make_node, make_nodes, make_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", None)
    client.force_login(user)
    return client


@pytest.fixture
def staff_client(client, tenant):
    user = get_user_model().objects.create_user("staff", password=None, is_staff=True)
    Membership.objects.create(user=user, tenant=tenant)
    grant_add(tenant=tenant, user=user, permission=Permission.FLEET_ADMIN)
    user.user_permissions.set(AuthPermission.objects.filter(content_type__app_label="fleet"))
    client.force_login(user)
    return client


@pytest.fixture
def two_tenants(tenant, other_tenant):
    ours = make_pool(tenant, name="ours-pool", budget="0.5")
    theirs = make_pool(other_tenant, name="theirs-pool", budget="0.5")
    our_nodes = make_nodes(ours, 4, prefix="ours")
    make_nodes(theirs, 2, prefix="theirs")
    workflow_start(tenant=tenant, node_id=our_nodes[0].id, kind="remediation")
    api_key_create(tenant=tenant, username="ours-user")
    api_key_create(tenant=other_tenant, username="theirs-user")
    return ours, theirs


PAGES = ["tenant", "membership", "grant", "apikey", "pool", "node", "nodesession", "workflow", "command"]


@pytest.mark.parametrize("page", PAGES)
def test_every_changelist_renders_for_superusers_and_staff(superuser_client, two_tenants, page):
    assert superuser_client.get(f"/admin/fleet/{page}/").status_code == 200
    assert superuser_client.get(f"/admin/fleet/{page}/", {"q": "x"}).status_code == 200


def test_superusers_see_all_tenants_and_staff_only_theirs(superuser_client, two_tenants, client, tenant):
    page = superuser_client.get("/admin/fleet/node/").content.decode()
    assert "ours-ours-pool-00000" in page
    assert "theirs-theirs-pool-00000" in page

    user = get_user_model().objects.create_user("staff", password=None, is_staff=True)
    Membership.objects.create(user=user, tenant=tenant)
    grant_add(tenant=tenant, user=user, permission=Permission.FLEET_ADMIN)
    user.user_permissions.set(AuthPermission.objects.filter(content_type__app_label="fleet"))
    client.force_login(user)
    for page_name in PAGES:
        response = client.get(f"/admin/fleet/{page_name}/")
        assert response.status_code == 200, page_name
        body = response.content.decode()
        assert "theirs" not in body, page_name
        assert "globex" not in body, page_name
    _, theirs = two_tenants
    assert client.get(f"/admin/fleet/pool/{theirs.id}/change/").status_code == 302  # not found in the scope
    node_form = client.get("/admin/fleet/node/add/").content.decode()
    assert "ours-pool" in node_form
    assert "theirs-pool" not in node_form


def test_staff_without_a_membership_see_nothing(client, two_tenants):
    user = get_user_model().objects.create_user("loner", password=None, is_staff=True)
    user.user_permissions.set(AuthPermission.objects.filter(content_type__app_label="fleet"))
    client.force_login(user)
    body = client.get("/admin/fleet/node/").content.decode()
    assert "ours-" not in body
    assert "theirs-" not in body


def test_pool_list_shows_budget_nodes_and_disruption_in_constant_queries(superuser_client, tenant, two_tenants):
    body = superuser_client.get("/admin/fleet/pool/").content.decode()
    assert "1/2" in body  # ours: 4 nodes, budget 0.5, one workflow

    with CaptureQueriesContext(connection) as few:
        superuser_client.get("/admin/fleet/pool/")
    for i in range(15):
        make_nodes(make_pool(tenant, name=f"extra-{i}"), 3, prefix=f"x{i}")
    with CaptureQueriesContext(connection) as many:
        superuser_client.get("/admin/fleet/pool/")
    assert len(few) == len(many)


def test_api_key_hash_is_never_shown(superuser_client, two_tenants):
    key = ApiKey.objects.first()
    for url in ("/admin/fleet/apikey/", f"/admin/fleet/apikey/{key.pk}/change/"):
        body = superuser_client.get(url).content.decode()
        assert key.key_hash not in body
    assert superuser_client.get("/admin/fleet/apikey/add/").status_code == 403


def test_revoke_action(superuser_client, two_tenants):
    keys = list(ApiKey.objects.values_list("pk", flat=True))
    response = superuser_client.post(
        "/admin/fleet/apikey/", {"action": "revoke", "_selected_action": keys}, follow=True
    )
    assert response.status_code == 200
    assert not ApiKey.objects.filter(revoked_at__isnull=True).exists()


def test_finish_action_goes_through_the_service(staff_client, two_tenants):
    workflow = Workflow.objects.get()
    response = staff_client.post(
        "/admin/fleet/workflow/", {"action": "finish", "_selected_action": [workflow.pk]}, follow=True
    )
    assert response.status_code == 200
    workflow.refresh_from_db()
    assert (workflow.state, workflow.finished_at is not None) == ("finished", True)


def test_adding_a_node_in_the_admin_shows_its_token_once(staff_client, tenant, two_tenants):
    ours, _ = two_tenants
    response = staff_client.post(
        "/admin/fleet/node/add/",
        {"tenant": tenant.pk, "pool": ours.pk, "name": "admin-node", "arch": "arm64"},
        follow=True,
    )
    assert response.status_code == 200
    node = Node.objects.get(name="admin-node")
    messages = [str(m) for m in response.context["messages"]]
    assert any("at_" in m for m in messages)
    assert node.agent_token_hash not in response.content.decode()


def test_node_list_shows_sessions_in_constant_queries(superuser_client, tenant):
    pool = make_pool(tenant)
    make_node(pool, "solo")
    with CaptureQueriesContext(connection) as few:
        superuser_client.get("/admin/fleet/node/")
    make_nodes(pool, 40)
    with CaptureQueriesContext(connection) as many:
        superuser_client.get("/admin/fleet/node/")
    assert len(few) == len(many)
