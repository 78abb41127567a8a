"""Node labels (docs/api.md#labels): shown, set at creation, replaced by PATCH, bulk-set; refusals change nothing."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from fleet.labels import labels_validate
from fleet.models import AuditEntry, Node
from tests.fleet.conftest import make_node, make_nodes, make_pool

pytestmark = pytest.mark.django_db

NODES = "/api/compute/nodes/"
BULK = "/api/compute/nodes/labels/"

GOOD_LABELS = {
    "ring": "canary",
    "zone": "",
    "example.com/team": "gpu_infra-1.2",
    "a": "b" * 63,
    "x" * 63: "Z",
    ("d" * 61 + ".") * 4 + "a/k": "v",
}
BAD_LABELS = [
    ({"": "v"}, ""),
    ({"-a": "v"}, "-a"),
    ({"a-": "v"}, "a-"),
    ({"a" * 64: "v"}, "a" * 64),
    ({"Example.com/k": "v"}, "Example.com/k"),
    ({"/k": "v"}, "/k"),
    ({"example.com/": "v"}, "example.com/"),
    ({"a/b/c": "v"}, "a/b/c"),
    ({"k": "v" * 64}, "k"),
    ({"k": "-v"}, "k"),
    ({"k": "v w"}, "k"),
    ({"k": 1}, "k"),
    ({"k": None}, "k"),
    ({"\uff52\uff49\uff4e\uff47": "v"}, "\uff52\uff49\uff4e\uff47"),
    ({"k": "caf\u00e9"}, "k"),
    ({"k\x00": "v"}, "k\x00"),
    ({"k": "v'; DROP TABLE fleet_node; --"}, "k"),
    ({("a" * 63 + ".") * 4 + "/k": "v"}, ("a" * 63 + ".") * 4 + "/k"),
]


def test_labels_are_shown_set_at_creation_and_empty_by_default(api, pool):
    created = api.post(
        NODES, {"name": "n1", "poolId": str(pool.id), "arch": "amd64", "labels": GOOD_LABELS}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert created.json()["labels"] == GOOD_LABELS
    plain = api.post(NODES, {"name": "n2", "poolId": str(pool.id), "arch": "amd64"}, format="json").json()
    assert plain["labels"] == {}
    null = api.post(NODES, {"name": "n3", "poolId": str(pool.id), "arch": "amd64", "labels": None}, format="json")
    assert null.json()["labels"] == {}
    Node.objects.filter(name="n3").delete()
    assert api.get(f"{NODES}{created.json()['id']}/").json()["labels"] == GOOD_LABELS
    assert {node["name"]: node["labels"] for node in api.get(NODES).json()["results"]} == {
        "n1": GOOD_LABELS,
        "n2": {},
    }
    entry = AuditEntry.objects.get(action="node.create", object_id=created.json()["id"])
    assert entry.after["labels"] == GOOD_LABELS


@pytest.mark.parametrize(("labels", "key"), BAD_LABELS)
def test_a_bad_label_at_creation_is_400_naming_the_key_and_creates_nothing(api, pool, labels, key):
    response = api.post(NODES, {"name": "n1", "poolId": str(pool.id), "arch": "amd64", "labels": labels}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_labels"
    assert body["key"] == key
    assert repr(key) in body["detail"]
    assert not Node.objects.exists()


@pytest.mark.parametrize("labels", [[], "ring=canary", 1, {f"k{i}": "v" for i in range(65)}])
def test_labels_that_are_not_a_map_of_at_most_64_are_400(api, pool, labels):
    response = api.post(NODES, {"name": "n1", "poolId": str(pool.id), "arch": "amd64", "labels": labels}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_labels"
    assert not Node.objects.exists()


def test_patch_replaces_the_whole_map_and_is_audited(api, pool):
    node, _ = make_node(pool, "n1")
    Node.objects.filter(pk=node.pk).update(labels={"old": "1", "ring": "a"})
    response = api.patch(f"{NODES}{node.id}/", {"labels": {"ring": "canary"}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["labels"] == {"ring": "canary"}
    assert response.json()["id"] == str(node.id)
    node.refresh_from_db()
    assert node.labels == {"ring": "canary"}
    entry = AuditEntry.objects.get(action="node.update", object_id=str(node.id))
    assert (entry.before, entry.after) == ({"labels": {"old": "1", "ring": "a"}}, {"labels": {"ring": "canary"}})
    assert entry.actor_via == "api"
    # The same map again changes nothing and records nothing.
    assert api.patch(f"{NODES}{node.id}/", {"labels": {"ring": "canary"}}, format="json").status_code == 200
    assert AuditEntry.objects.filter(action="node.update").count() == 1


@pytest.mark.parametrize(("labels", "key"), BAD_LABELS[:6])
def test_a_bad_patch_is_400_and_changes_nothing(api, pool, labels, key):
    node, _ = make_node(pool, "n1")
    Node.objects.filter(pk=node.pk).update(labels={"ring": "a"})
    response = api.patch(f"{NODES}{node.id}/", {"labels": labels}, format="json")
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["key"]) == ("invalid_labels", key)
    node.refresh_from_db()
    assert node.labels == {"ring": "a"}
    assert not AuditEntry.objects.filter(action="node.update").exists()


def test_patch_refuses_other_fields_and_other_tenants(api, other_api, pool):
    node, _ = make_node(pool, "n1")
    assert api.patch(f"{NODES}{node.id}/", {"labels": {}, "name": "x"}, format="json").status_code == 400
    assert api.patch(f"{NODES}{node.id}/", {}, format="json").status_code == 400
    assert api.patch(f"{NODES}{node.id}/", {"labels": None}, format="json").json()["code"] == "invalid_labels"
    assert other_api.patch(f"{NODES}{node.id}/", {"labels": {"a": "b"}}, format="json").status_code == 404
    assert api.patch(f"{NODES}not-an-id/", {"labels": {}}, format="json").status_code == 404
    node.refresh_from_db()
    assert node.labels == {}


# --- bulk ---------------------------------------------------------------------------------------
def test_bulk_sets_and_removes_on_the_matching_nodes_in_one_update(api, pool, other_tenant):
    other_pool = make_pool(pool.tenant, "other")
    nodes = make_nodes(pool, 6) + make_nodes(other_pool, 2)
    Node.objects.filter(pk__in=[n.pk for n in nodes[:3]]).update(labels={"zone": "a", "old": "x"})
    foreign = make_nodes(make_pool(other_tenant, "gpu-a"), 2)
    Node.objects.filter(pk__in=[n.pk for n in foreign]).update(labels={"zone": "a"})

    counter = _Updates()
    with connection.execute_wrapper(counter):
        response = api.post(BULK, {"selector": "zone=a", "set": {"ring": "canary"}, "remove": ["old"]}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {"matched": 3}
    assert len([sql for sql in counter.updates if "fleet_node" in sql]) == 1
    labels = {n.pk: n.labels for n in Node.objects.all()}
    for node in nodes[:3]:
        assert labels[node.pk] == {"zone": "a", "ring": "canary"}
    for node in nodes[3:]:
        assert labels[node.pk] == {}
    for node in foreign:
        assert labels[node.pk] == {"zone": "a"}
    entry = AuditEntry.objects.get(action="node.labels")
    assert entry.after["matched"] == 3
    assert entry.after["set"] == {"ring": "canary"}
    assert entry.after["remove"] == ["old"]

    # Limited to pools; the empty selector matches every node of them.
    response = api.post(BULK, {"selector": "", "poolIds": [str(other_pool.id)], "set": {"p": "o"}}, format="json")
    assert response.json() == {"matched": 2}
    assert Node.objects.filter(labels__contains={"p": "o"}).count() == 2


class _Updates:
    """An execute wrapper that keeps the UPDATE statements it sees."""

    def __init__(self) -> None:
        self.updates: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("UPDATE"):
            self.updates.append(sql)
        return execute(sql, params, many, context)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"selector": "zone in (a", "set": {"ring": "c"}}, "invalid_selector"),
        ({"selector": 1, "set": {"ring": "c"}}, "invalid_selector"),
        ({"selector": "zone=a", "set": {"-bad": "c"}}, "invalid_labels"),
        ({"selector": "zone=a", "set": ["ring"]}, "invalid_labels"),
        ({"selector": "zone=a", "remove": ["Bad/k"]}, "invalid_labels"),
        ({"selector": "zone=a", "remove": "ring"}, "invalid_labels"),
        ({"selector": "zone=a", "poolIds": ["00000000-0000-0000-0000-000000000000"]}, "unknown_pool"),
        ({"selector": "zone=a", "sett": {}}, "invalid_input"),
        ({"set": {"ring": "c"}}, "invalid_input"),
    ],
)
def test_bulk_refusals_change_nothing(api, pool, body, code):
    nodes = make_nodes(pool, 2)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(labels={"zone": "a"})
    response = api.post(BULK, body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code
    assert all(n.labels == {"zone": "a"} for n in Node.objects.all())
    assert not AuditEntry.objects.filter(action="node.labels").exists()


def test_bulk_over_64_labels_refuses_the_whole_change(api, pool):
    nodes = make_nodes(pool, 2)
    Node.objects.filter(pk=nodes[0].pk).update(labels={f"k{i}": "v" for i in range(60)})
    response = api.post(BULK, {"selector": "", "set": {f"n{i}": "v" for i in range(5)}}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_labels"
    assert Node.objects.get(pk=nodes[1].pk).labels == {}
    assert len(Node.objects.get(pk=nodes[0].pk).labels) == 60


def test_the_database_refuses_labels_that_are_not_an_object_or_too_many(pool):
    node, _ = make_node(pool)
    for labels in (["a"], {f"k{i}": "v" for i in range(65)}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Node.objects.filter(pk=node.pk).update(labels=labels)


def test_the_validator_returns_a_plain_copy():
    given = {"a": "b"}
    assert labels_validate(given) == given
    assert labels_validate(given) is not given
