"""Labels on the admin's node pages: editable, checked by the API's validator, audited."""

from __future__ import annotations

import json

import pytest

from fleet.models import AuditEntry, Node
from tests.fleet.conftest import make_node
from tests.fleet.test_admin import staff_client, two_tenants  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db
# The node page's session inline posts its (empty) management form.
INLINE = {"session-TOTAL_FORMS": "0", "session-INITIAL_FORMS": "0"}


def test_labels_are_editable_on_the_node_page_and_audited(staff_client, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    page = f"/admin/fleet/node/{node.pk}/change/"
    assert 'name="labels"' in staff_client.get(page).content.decode()

    response = staff_client.post(page, {"name": "labelled", "labels": json.dumps({"ring": "canary"}), **INLINE})
    assert response.status_code == 302, response.content.decode()[:2000]
    node.refresh_from_db()
    assert node.labels == {"ring": "canary"}
    entry = AuditEntry.objects.get(action="node.update", object_id=str(node.pk))
    assert (entry.after, entry.actor_via) == ({"labels": {"ring": "canary"}}, "admin")


def test_a_bad_label_in_the_admin_is_the_validators_message_and_changes_nothing(staff_client, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    response = staff_client.post(
        f"/admin/fleet/node/{node.pk}/change/", {"name": "renamed", "labels": json.dumps({"-bad": "x"}), **INLINE}
    )
    assert response.status_code == 200
    assert "the key &#x27;-bad&#x27; is invalid" in response.content.decode()
    node.refresh_from_db()
    assert (node.name, node.labels) == ("labelled", {})
    assert not AuditEntry.objects.filter(action="node.update").exists()


def test_a_node_added_in_the_admin_takes_labels(staff_client, tenant, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    response = staff_client.post(
        "/admin/fleet/node/add/",
        {"tenant": tenant.pk, "pool": ours.pk, "name": "new", "arch": "amd64", "labels": '{"zone": "a"}'},
    )
    assert response.status_code == 302
    assert Node.objects.get(name="new").labels == {"zone": "a"}
