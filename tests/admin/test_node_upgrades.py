"""The node upgrade list: filters by rollout, state, wave and pool; read-only; tenant-scoped."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rollout.models import NodeUpgrade
from tests.admin.conftest import make_rollout
from tests.rollout.helpers import tick

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/nodeupgrade/"


@pytest.fixture
def two(tenant, releases):
    """Two rollouts of acme: one over pools a and b (ticked once), one over pool c."""
    first = make_rollout(tenant, {"pool-a": (4, "0.5"), "pool-b": (4, "0.5")}, waves=[25, 100])
    tick(first)
    second = make_rollout(tenant, {"pool-c": (3, "1")})
    return first, second


def rows(response) -> list[NodeUpgrade]:
    return list(response.context["cl"].result_list)


def test_the_list_shows_each_upgrade(root, two):
    first, _ = two
    response = root.get(LIST, {"rollout": first.pk})
    body = response.content.decode()
    assert len(rows(response)) == 8
    flying = NodeUpgrade.objects.filter(rollout=first, state="in_flight").select_related("node").first()
    for text in (flying.node.name, "pool-a", "in flight", "0.9.0", f"1.0.0 · {str(first.pk)[:8]}"):
        assert text in body
    assert "upgrade-state-in_flight" in body
    for column in ("previous", "times", "started", "deadline", "waiting for"):
        assert column in body.lower()


def test_filters_by_rollout_state_wave_and_pool(root, two):
    first, second = two
    assert len(rows(root.get(LIST))) == 11
    assert len(rows(root.get(LIST, {"rollout": second.pk}))) == 3
    in_flight = rows(root.get(LIST, {"rollout": first.pk, "state__exact": "in_flight"}))
    assert in_flight
    assert {u.state for u in in_flight} == {"in_flight"}
    wave_1 = rows(root.get(LIST, {"rollout": first.pk, "wave": 1}))
    assert len(wave_1) == 6
    assert {u.wave for u in wave_1} == {1}
    pool_b = first.pools.get(name="pool-b")
    by_pool = rows(root.get(LIST, {"rollout": first.pk, "pool": pool_b.pk}))
    assert len(by_pool) == 4
    assert {u.pool_id for u in by_pool} == {pool_b.pk}
    # The filter choices follow the chosen rollout; bad values match nothing, never a 500.
    body = root.get(LIST, {"rollout": first.pk}).content.decode()
    assert "pool-b" in body
    assert "?pool=" in body
    assert "pool-c" not in body.split('id="changelist-filter"')[1]
    for bad in ({"rollout": "nope"}, {"wave": "x"}, {"pool": "nope"}):
        response = root.get(LIST, bad)
        assert response.status_code == 200
        assert rows(response) == []


def test_the_detail_page_links_to_the_filtered_list(root, two):
    first, _ = two
    body = root.get(f"/admin/rollout/rollout/{first.pk}/change/").content.decode()
    assert f'href="{LIST}?rollout={first.pk}&amp;wave=1"' in body


def test_upgrades_are_read_only(root, two):
    upgrade = NodeUpgrade.objects.filter(state="in_flight").first()
    page = root.get(f"{LIST}{upgrade.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert root.post(f"{LIST}{upgrade.pk}/change/", {"state": "succeeded"}).status_code == 403
    assert root.post(f"{LIST}{upgrade.pk}/delete/", {"post": "yes"}).status_code == 403
    assert root.get(f"{LIST}add/").status_code == 403
    upgrade.refresh_from_db()
    assert upgrade.state == "in_flight"


def test_staff_see_only_their_tenant(staff, two, other_tenant):
    theirs = make_rollout(other_tenant, {"pool-z": (2, "1")})
    response = staff.get(LIST)
    assert len(rows(response)) == 11
    assert "pool-z" not in response.content.decode()
    assert rows(staff.get(LIST, {"rollout": theirs.pk})) == []
    upgrade = NodeUpgrade.objects.filter(rollout=theirs).first()
    assert staff.get(f"{LIST}{upgrade.pk}/change/").status_code == 302  # "doesn't exist"


def test_the_list_takes_a_constant_number_of_queries(root, two, tenant):
    with CaptureQueriesContext(connection) as few:
        root.get(LIST)
    tick(make_rollout(tenant, {"pool-d": (40, "0.5")}))
    with CaptureQueriesContext(connection) as many:
        root.get(LIST)
    assert len(few) == len(many)


def test_a_refusal_reads_in_plain_words_and_the_root_chain_is_listed_read_only(root, tenant, releases):
    rollout = make_rollout(tenant, {"pool-r": (1, "1")})
    tick(rollout)
    NodeUpgrade.objects.filter(rollout=rollout).update(state="failed", reason="refused:bad_signature")
    body = root.get(LIST, {"rollout": rollout.pk}).content.decode()
    assert "the node refused it: not signed by the keys it trusts" in body
    chain = root.get("/admin/rollout/releaseroot/")
    assert chain.status_code == 200
    assert len(chain.context["cl"].result_list) == 1  # root 1, recorded when the releases were registered
    assert root.get("/admin/rollout/releaseroot/add/").status_code == 403
