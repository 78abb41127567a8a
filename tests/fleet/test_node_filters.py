"""Finding nodes (docs/api.md#nodes): ``GET /api/compute/nodes/`` by ``poolId``, ``daemonVersion`` and
``online``, combined, paged; a bad value is 400 ``invalid_input``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import NodeSession
from tests.factories import fleet

pytestmark = pytest.mark.django_db

URL = "/api/compute/nodes/"


def names(api, **params) -> list[str]:
    """Every page of the list, in order: the filters must hold across pages."""
    found: list[str] = []
    url, query = URL, {"limit": 2, **params}
    while url:
        response = api.get(url, query)
        assert response.status_code == 200, response.content
        found += [node["name"] for node in response.json()["results"]]
        url, query = response.json()["next"], {}
    return found


@pytest.fixture
def nodes(tenant):
    """gpu: 3 on 1.0.0 (one offline), 2 on 0.9.0; cpu: 2 on 1.0.0, 1 that never joined."""
    gpu = fleet(tenant, {"gpu": (5, "1")}, version="1.0.0")["gpu"]
    cpu = fleet(tenant, {"cpu": (2, "1")}, version="1.0.0")["cpu"]
    NodeSession.objects.filter(node__in=gpu[3:]).update(daemon_version="0.9.0")
    NodeSession.objects.filter(node=gpu[0]).update(last_seen_at=timezone.now() - timedelta(hours=1))
    fleet(tenant, {"new": (1, "1")})
    NodeSession.objects.filter(node__pool__name="new").delete()
    return {"gpu": gpu, "cpu": cpu}


def test_each_filter_alone(api, nodes):
    gpu_pool = str(nodes["gpu"][0].pool_id)
    assert names(api, poolId=gpu_pool) == [f"gpu-{i:05d}" for i in range(5)]
    assert names(api, daemonVersion="0.9.0") == ["gpu-00003", "gpu-00004"]
    assert names(api, daemonVersion="1.0.0") == ["cpu-00000", "cpu-00001", "gpu-00000", "gpu-00001", "gpu-00002"]
    assert names(api, online="false") == ["gpu-00000", "new-00000"]
    assert len(names(api, online="true")) == 6
    assert len(names(api)) == 8


def test_filters_combine(api, nodes):
    gpu_pool = str(nodes["gpu"][0].pool_id)
    assert names(api, poolId=gpu_pool, daemonVersion="1.0.0", online="true") == ["gpu-00001", "gpu-00002"]
    assert names(api, poolId=gpu_pool, daemonVersion="1.0.0", online="false") == ["gpu-00000"]
    assert names(api, daemonVersion="2.0.0") == []


def test_the_answers_say_what_was_filtered(api, nodes):
    rows = api.get(URL, {"online": "false", "limit": 100}).json()["results"]
    assert {row["online"] for row in rows} == {False}
    rows = api.get(URL, {"daemonVersion": "0.9.0"}).json()["results"]
    assert {row["daemonVersion"] for row in rows} == {"0.9.0"}


@pytest.mark.parametrize("params", [{"online": "yes"}, {"online": "1"}, {"poolId": "gpu"}])
def test_bad_values_are_400(api, nodes, params):
    response = api.get(URL, params)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"


def test_another_tenants_nodes_never_show(other_api, nodes):
    assert names(other_api, daemonVersion="1.0.0") == []
