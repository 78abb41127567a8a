"""The node, session and command services the rollout controller calls."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import InvalidInput
from fleet.models import Command, Node, NodeSession
from fleet.services.commands import command_enqueue, commands_enqueue
from fleet.services.nodes import heartbeat_seconds, node_is_online, nodes_set_daemon, online_node_q
from fleet.services.pools import pools_set_default_daemon_version
from tests.fleet.conftest import make_nodes, make_pool

pytestmark = pytest.mark.django_db

DAEMON = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "d" * 64}


def test_nodes_set_daemon_is_one_update_that_keeps_other_spec_keys(tenant, django_assert_num_queries):
    pool = make_pool(tenant)
    nodes = make_nodes(pool, 5)
    Node.objects.filter(pk=nodes[0].pk).update(spec={"daemon": None, "labels": {"gpu": "a100"}})
    Node.objects.filter(pk=nodes[1].pk).update(spec=[])  # a spec that is not an object is replaced by one

    with django_assert_num_queries(1):
        assert nodes_set_daemon(node_ids=[n.id for n in nodes[:4]], daemon=DAEMON) == 4

    specs = {node.id: node.spec for node in Node.objects.all()}
    assert specs[nodes[0].id] == {"daemon": DAEMON, "labels": {"gpu": "a100"}}
    assert specs[nodes[1].id] == {"daemon": DAEMON}
    assert specs[nodes[2].id] == {"daemon": DAEMON}
    assert specs[nodes[4].id] == {"daemon": None}

    assert nodes_set_daemon(node_ids=[nodes[0].id], daemon=None) == 1
    assert Node.objects.get(pk=nodes[0].pk).spec == {"daemon": None, "labels": {"gpu": "a100"}}
    assert nodes_set_daemon(node_ids=[], daemon=DAEMON) == 0


def test_online_node_q_matches_node_is_online(tenant):
    pool = make_pool(tenant)
    fresh, stale, left, _never = make_nodes(pool, 4)
    now = timezone.now()
    for node, seen, left_at in ((fresh, now - timedelta(seconds=30), None), (stale, now - timedelta(seconds=31), None)):
        NodeSession.objects.create(
            node=node, daemon_version="1", protocol_version=2, joined_at=seen, last_seen_at=seen, left_at=left_at
        )
    NodeSession.objects.create(
        node=left, daemon_version="1", protocol_version=2, joined_at=now, last_seen_at=now, left_at=now
    )

    assert set(Node.objects.filter(online_node_q(now=now)).values_list("name", flat=True)) == {fresh.name}
    assert Node.objects.exclude(online_node_q(now=now)).count() == 3
    for node in Node.objects.select_related("session"):
        assert node_is_online(node=node, now=now) == (node.id == fresh.id)


@pytest.mark.parametrize(
    ("value", "seconds"), [(10, 10), (5, 5), ("5", 5), ("soon", 10), (0, 10), (-3, 10), (None, 10), (True, 10)]
)
def test_heartbeat_seconds_falls_back_to_ten(value, seconds):
    with override_settings(FLEET_HEARTBEAT_SECONDS=value):
        assert heartbeat_seconds() == seconds


def test_the_online_window_follows_the_heartbeat_setting(tenant):
    (node,) = make_nodes(make_pool(tenant), 1)
    now = timezone.now()
    seen = now - timedelta(seconds=20)
    NodeSession.objects.create(node=node, daemon_version="1", protocol_version=2, joined_at=seen, last_seen_at=seen)
    with override_settings(FLEET_HEARTBEAT_SECONDS=5):
        assert not Node.objects.filter(online_node_q(now=now)).exists()
    with override_settings(FLEET_HEARTBEAT_SECONDS=10):
        assert Node.objects.filter(online_node_q(now=now)).exists()


def test_commands_enqueue_is_a_bulk_insert_and_supersedes_open_upgrades(tenant):
    nodes = make_nodes(make_pool(tenant), 50)
    old = command_enqueue(node_id=nodes[0].id, kind="daemon.upgrade", payload={"version": "1.4.0"})
    Command.objects.filter(pk=old.pk).update(state="acked")

    with CaptureQueriesContext(connection) as queries:
        created = commands_enqueue(
            node_ids_payloads=[(node.id, {"version": "1.5.0", "n": i}) for i, node in enumerate(nodes)],
            kind="daemon.upgrade",
        )
    assert created == 50
    statements = [q["sql"].split()[0] for q in queries if "SAVEPOINT" not in q["sql"]]
    assert statements == ["UPDATE", "INSERT"]  # cancel the superseded ones, one bulk INSERT: whatever the node count
    assert Command.objects.get(pk=old.pk).state == "cancelled"
    assert Command.objects.filter(state="pending", payload__version="1.5.0").count() == 50
    assert commands_enqueue(node_ids_payloads=[], kind="daemon.upgrade") == 0
    with pytest.raises(InvalidInput):
        commands_enqueue(node_ids_payloads=[(nodes[0].id, {})], kind="reboot")


def test_pools_set_default_daemon_version(tenant):
    pools = [make_pool(tenant, name=f"p{i}") for i in range(3)]
    assert pools_set_default_daemon_version(pool_ids=[p.id for p in pools[:2]], version="1.5.0") == 2
    for pool in pools:
        pool.refresh_from_db()
    assert [p.default_daemon_version for p in pools] == ["1.5.0", "1.5.0", None]
