"""A node's admin page: its labels, a link to its current rollout and to its upgrade history (the plug-in's
links through fleet/plugins.py), the signed envelope folded."""

from __future__ import annotations

import pytest

from fleet.models import Node
from rollout.models import NodeUpgrade
from tests.admin.conftest import make_rollout

pytestmark = pytest.mark.django_db


def node_page(node: Node) -> str:
    return f"/admin/fleet/node/{node.pk}/change/"


def test_the_node_page_links_its_current_rollout_and_its_upgrade_history(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (3, "0.5")}, waves=[100])
    upgrade = NodeUpgrade.objects.filter(rollout=rollout).order_by("position").first()
    node = upgrade.node
    Node.objects.filter(pk=node.pk).update(labels={"ring": "canary"})

    page = root.get(node_page(node))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="labels-key-0"' in body  # editable, one key/value row each
    assert "canary" in body
    assert f'href="/admin/rollout/rollout/{rollout.pk}/change/"' in body
    assert "current rollout: 1.0.0" in body
    history = f"/admin/rollout/nodeupgrade/?node__id__exact={node.pk}"
    assert f'href="{history}"' in body

    listing = root.get(history)
    assert listing.status_code == 200  # the lookup is allowed, not answered with ?e=1
    assert [row.pk for row in listing.context["cl"].result_list] == [upgrade.pk]


def test_a_node_in_no_rollout_links_only_its_history_and_folds_its_envelope(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (2, "0.5")}, waves=[100])
    NodeUpgrade.objects.filter(rollout=rollout).update(claims_node=False, state=NodeUpgrade.State.CANCELLED)
    node = Node.objects.filter(pool__in=rollout.pools.all()).first()
    node.spec = {"daemon": {"version": "1.0.0", "url": "/d", "sha256": "ab", "release": {"signed": {"v": 1}}}}
    node.save(update_fields=["spec"])
    body = root.get(node_page(node)).content.decode()
    assert "current rollout" not in body
    assert f"/admin/rollout/rollout/{rollout.pk}/change/" not in body
    assert f"/admin/rollout/nodeupgrade/?node__id__exact={node.pk}" in body
    assert "<details><summary>signed release envelope</summary>" in body
