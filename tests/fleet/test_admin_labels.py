"""Labels on the admin's node pages: key/value rows (fleet/admin_labels.py), checked by the API's validator,
audited."""

from __future__ import annotations

import pytest

from fleet.models import AuditEntry, Node
from tests.fleet.conftest import make_node
from tests.fleet.test_admin import staff_client, two_tenants  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db
# The node page's session inline posts its (empty) management form.
INLINE = {"session-TOTAL_FORMS": "0", "session-INITIAL_FORMS": "0"}


def rows(labels: dict[str, str], *, empty: int = 3) -> dict[str, str]:
    """The form's key/value rows of ``labels``, then ``empty`` empty rows (as the page offers them)."""
    pairs = [*labels.items(), *[("", "")] * empty]
    return {
        **{f"labels-key-{i}": key for i, (key, _) in enumerate(pairs)},
        **{f"labels-value-{i}": value for i, (_, value) in enumerate(pairs)},
    }


def test_labels_are_editable_on_the_node_page_and_audited(staff_client, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    page = f"/admin/fleet/node/{node.pk}/change/"
    html = staff_client.get(page).content.decode()
    assert 'name="labels-key-0"' in html  # rows of key and value, not a JSON box
    assert "<textarea" not in html

    response = staff_client.post(page, {"name": "labelled", **rows({"ring": "canary"}), **INLINE})
    assert response.status_code == 302, response.content.decode()[:2000]
    node.refresh_from_db()
    assert node.labels == {"ring": "canary"}
    entry = AuditEntry.objects.get(action="node.update", object_id=str(node.pk))
    assert (entry.after, entry.actor_via) == ({"labels": {"ring": "canary"}}, "admin")


def test_a_bad_label_in_the_admin_is_the_validators_message_and_changes_nothing(staff_client, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    response = staff_client.post(
        f"/admin/fleet/node/{node.pk}/change/", {"name": "renamed", **rows({"-bad": "x"}), **INLINE}
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
        {"tenant": tenant.pk, "pool": ours.pk, "name": "new", "arch": "amd64", **rows({"zone": "a"})},
    )
    assert response.status_code == 302
    assert Node.objects.get(name="new").labels == {"zone": "a"}


def test_a_cleared_row_removes_its_label(staff_client, two_tenants):  # noqa: F811
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    Node.objects.filter(pk=node.pk).update(labels={"ring": "canary", "zone": "a"})
    page = f"/admin/fleet/node/{node.pk}/change/"
    assert 'value="canary"' in staff_client.get(page).content.decode()
    response = staff_client.post(page, {"name": "labelled", **rows({"": "", "zone": "b"}), **INLINE})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.labels == {"zone": "b"}


@pytest.mark.parametrize(
    ("posted", "message"),
    [
        ({"labels-key-0": "ring", "labels-value-0": "a", "labels-key-1": "ring", "labels-value-1": "b"}, "given twice"),
        ({"labels-key-0": "", "labels-value-0": "orphan"}, "has no key"),
    ],
)
def test_a_duplicate_key_or_a_value_without_a_key_is_refused_and_nothing_changes(
    staff_client,  # noqa: F811
    two_tenants,  # noqa: F811
    posted,
    message,
):
    ours, _ = two_tenants
    node, _ = make_node(ours, "labelled")
    response = staff_client.post(f"/admin/fleet/node/{node.pk}/change/", {"name": "renamed", **posted, **INLINE})
    assert response.status_code == 200
    assert message in response.content.decode()
    node.refresh_from_db()
    assert (node.name, node.labels) == ("labelled", {})
