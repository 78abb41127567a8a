"""Every list under /api/compute/ is paginated (docs/api.md#lists): limit, an opaque cursor, results and next.

Each list is seeded with rows whose ordering values tie (same ``created_at``,
``at``, ``started_at``), inserted out of order, with rows its filter leaves
out; walking it page by page must give every matching row exactly once, in
the list's own order, in a number of queries that does not grow with the rows.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Node, Pool, Workflow
from rollout.models import NodeUpgrade, Release, Rollout, RolloutEvent, RolloutWave
from tests.factories import fleet, rollout_settings
from tests.fleet.conftest import make_nodes

pytestmark = pytest.mark.django_db

LISTS = ["pools", "nodes", "workflows", "releases", "rollouts", "rollout-nodes", "rollout-events"]


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"


@dataclass
class Seeded:
    url: str
    params: dict[str, Any]  # the list's filters
    key: Callable[[dict], Any]  # a row's identity in the answer
    expected: list  # identities of the matching rows, in the list's order


def _shuffled(items: list) -> list:
    items = list(items)
    random.Random(7).shuffle(items)
    return items


def _release(sequence: int, version: str | None = None) -> Release:
    return Release(
        version=version or f"1.0.{sequence}",
        sequence=sequence,
        payload=b"{}",
        payload_sha256=uuid.uuid4().hex * 2,
        envelope="{}",
        registered_at=timezone.now(),
    )


def _rollouts(tenant, count: int, *, states=("completed", "active")) -> list[Rollout]:
    release = Release.objects.order_by("sequence").first()
    if release is None:
        release = _release(1)
        release.save()
    base = timezone.now()
    rows = Rollout.objects.bulk_create(
        _shuffled(
            [
                Rollout(
                    tenant=tenant,
                    release=release,
                    waves=[100],
                    max_failure_ratio=Decimal("0.1"),
                    soak_seconds=0,
                    upgrade_timeout_seconds=60,
                    state=states[i % len(states)],
                    created_at=base - timedelta(seconds=i // 3),  # three rollouts share each instant
                )
                for i in range(count)
            ]
        )
    )
    RolloutWave.objects.bulk_create(RolloutWave(rollout=r, index=0, percent=Decimal(100), total=0) for r in rows)
    return rows


def seed(kind: str, tenant, count: int) -> Seeded:
    """``count`` rows the list's filter keeps (and some it drops) for one list."""
    if kind == "pools":
        Pool.objects.bulk_create(Pool(tenant=tenant, name=f"pool-{i:04d}") for i in _shuffled(range(count)))
        names = sorted(f"pool-{i:04d}" for i in range(count))
        return Seeded("/api/compute/pools/", {}, lambda row: row["name"], names)
    if kind == "nodes":
        pool, other = (Pool.objects.create(tenant=tenant, name=name) for name in ("kept", "dropped"))
        make_nodes(other, count // 2 + 1)
        make_nodes(pool, count)
        ids = list(Node.objects.filter(pool=pool).order_by("name").values_list("id", flat=True))
        return Seeded("/api/compute/nodes/", {"poolId": str(pool.id)}, lambda row: row["id"], [str(i) for i in ids])
    if kind == "workflows":
        nodes = fleet(tenant, {"wf": (count + 2, "1")})["wf"]
        base = timezone.now()
        Workflow.objects.bulk_create(
            Workflow(
                tenant=tenant,
                node=node,
                pool=node.pool,
                kind="remediation",
                state="finished" if i < count else "active",
                started_at=base - timedelta(seconds=i // 3),  # ties: the id decides among them
                finished_at=base if i < count else None,
            )
            for i, node in _shuffled(list(enumerate(nodes)))
        )
        rows = Workflow.objects.filter(state="finished")
        ordered = sorted(rows, key=lambda w: (w.started_at, w.id), reverse=True)  # started_at then id, newest first
        return Seeded(
            "/api/compute/workflows/", {"state": "finished"}, lambda row: row["id"], [str(w.id) for w in ordered]
        )
    if kind == "releases":
        Release.objects.bulk_create(_release(sequence) for sequence in _shuffled(range(1, count + 1)))
        return Seeded("/api/compute/releases/", {}, lambda row: row["sequence"], list(range(count, 0, -1)))
    if kind == "rollouts":
        rows = [r for r in _rollouts(tenant, 2 * count) if r.state == "completed"]
        ordered = sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)
        return Seeded(
            "/api/compute/rollouts/", {"state": "completed"}, lambda row: row["id"], [str(r.id) for r in ordered]
        )
    if kind == "rollout-nodes":
        (rollout,) = _rollouts(tenant, 1)
        nodes = fleet(tenant, {"rn": (2 * count, "1")})["rn"]
        NodeUpgrade.objects.bulk_create(
            NodeUpgrade(
                rollout=rollout,
                node=node,
                pool=node.pool,
                wave=position % 2,
                position=position,
                target_version="1.0.1",
            )
            for position, node in _shuffled(list(enumerate(nodes)))
        )
        expected = [str(node.id) for position, node in enumerate(nodes) if position % 2 == 1]
        return Seeded(f"/api/compute/rollouts/{rollout.id}/nodes/", {"wave": 1}, lambda row: row["nodeId"], expected)
    if kind == "rollout-events":
        (rollout,) = _rollouts(tenant, 1)
        base = timezone.now()
        RolloutEvent.objects.bulk_create(
            RolloutEvent(rollout=rollout, kind="rollout.wave", at=base + timedelta(seconds=i // 3), data={"i": i})
            for i in range(count)  # inserted in order: the id breaks ties of `at` the same way
        )
        return Seeded(
            f"/api/compute/rollouts/{rollout.id}/events/", {}, lambda row: row["data"]["i"], list(range(count))
        )
    raise AssertionError(kind)


def walk(api, url: str, params: dict) -> tuple[list[dict], list[dict]]:
    """Every row of a list following ``next``, and the pages' bodies."""
    response = api.get(url, params)
    rows: list[dict] = []
    pages: list[dict] = []
    while True:
        assert response.status_code == 200, response.content[:300]
        body = response.json()
        assert set(body) == {"results", "next"}
        pages.append(body)
        rows += body["results"]
        if body["next"] is None:
            return rows, pages
        assert len(pages) < 1000
        response = api.get(body["next"])


def _cursor(next_url: str) -> str:
    return parse_qs(urlsplit(next_url).query)["cursor"][0]


def assert_refused(response, field: str) -> None:
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert (body["code"], body["field"]) == ("invalid_input", field)
    assert field in body["detail"]


# --- a walk returns every row once, in the list's order, filters kept ----------------------------
@pytest.mark.parametrize("kind", LISTS)
def test_a_cursor_walk_returns_every_matching_row_once_in_the_lists_order(api, tenant, kind):
    seeded = seed(kind, tenant, 25)
    rows, pages = walk(api, seeded.url, {**seeded.params, "limit": 4})
    assert [seeded.key(row) for row in rows] == seeded.expected
    assert [len(page["results"]) for page in pages] == [4] * 6 + [1]
    for page in pages[:-1]:
        query = parse_qs(urlsplit(page["next"]).query)
        assert urlsplit(page["next"]).path == seeded.url
        assert {name: values[0] for name, values in query.items() if name != "cursor"} == {
            **{name: str(value) for name, value in seeded.params.items()},
            "limit": "4",
        }  # the next link carries the filters and the limit
    # the default page holds them all, in the same order
    whole = api.get(seeded.url, seeded.params).json()
    assert whole["next"] is None
    assert [seeded.key(row) for row in whole["results"]] == seeded.expected


def test_a_page_exactly_full_has_no_next(api, tenant):
    seeded = seed("pools", tenant, 5)
    body = api.get(seeded.url, {"limit": 5}).json()
    assert (len(body["results"]), body["next"]) == (5, None)
    body = api.get(seeded.url, {"limit": 4}).json()
    assert len(body["results"]) == 4
    assert body["next"].startswith("http://testserver/api/compute/pools/?")  # absolute
    last = api.get(body["next"]).json()
    assert ([row["name"] for row in last["results"]], last["next"]) == (["pool-0004"], None)


def test_the_default_limit_is_100_and_the_most_is_1000(api, tenant):
    pool = Pool.objects.create(tenant=tenant, name="big")
    make_nodes(pool, 1001)
    default = api.get("/api/compute/nodes/").json()
    assert len(default["results"]) == 100
    assert parse_qs(urlsplit(default["next"]).query).keys() == {"cursor"}
    most = api.get("/api/compute/nodes/", {"limit": 1000}).json()
    assert len(most["results"]) == 1000
    rest = api.get(most["next"]).json()
    assert (len(rest["results"]), rest["next"]) == (1, None)
    names = [row["name"] for row in most["results"] + rest["results"]]
    assert names == sorted(names)
    assert len(set(names)) == 1001
    assert_refused(api.get("/api/compute/nodes/", {"limit": 1001}), "limit")


def test_rows_inserted_during_a_walk_are_never_repeated_nor_make_it_skip(api, tenant):
    """Keyset: rows added behind the cursor are not seen, rows ahead of it are; none twice, none lost."""
    _rollouts(tenant, 12, states=("completed",))
    before = {str(r.id) for r in Rollout.objects.all()}
    first = api.get("/api/compute/rollouts/", {"limit": 5}).json()
    seen = [row["id"] for row in first["results"]]
    # Newer rollouts (behind the cursor: the list is newest first) and older ones (ahead), with tied instants.
    oldest = Rollout.objects.order_by("created_at").first().created_at
    newer = _rollouts(tenant, 3, states=("completed",))
    Rollout.objects.filter(id__in=[r.id for r in newer]).update(created_at=timezone.now() + timedelta(days=1))
    older = _rollouts(tenant, 3, states=("completed",))
    Rollout.objects.filter(id__in=[r.id for r in older]).update(created_at=oldest - timedelta(days=1))
    rest, _ = walk(api, first["next"], {})
    seen += [row["id"] for row in rest]
    assert len(seen) == len(set(seen))
    assert before <= set(seen)
    assert {str(r.id) for r in older} <= set(seen)
    assert not {str(r.id) for r in newer} & set(seen)


# --- bad limits and cursors are 400s naming the parameter --------------------------------------
# The last is an Arabic-Indic five: a digit to str.isdigit, not to us.
BAD_LIMITS = ["0", "-1", "1001", "99999999999999999999", "abc", "", " 5", "5 ", "+5", "1.5", "\u0665"]


@pytest.mark.parametrize("limit", BAD_LIMITS)
@pytest.mark.parametrize("kind", ["nodes", "rollout-events"])
def test_a_bad_limit_is_400_naming_limit(api, tenant, kind, limit):
    seeded = seed(kind, tenant, 3)
    assert_refused(api.get(seeded.url, {"limit": limit}), "limit")


@pytest.mark.parametrize("kind", LISTS)
def test_a_forged_or_foreign_cursor_is_400_naming_cursor(api, tenant, kind):
    seeded = seed(kind, tenant, 3)
    real = _cursor(api.get(seeded.url, {**seeded.params, "limit": 1}).json()["next"])
    value, _, signature = real.rpartition(":")
    forged = [
        "",
        "garbage",
        "e30:xyz",
        real[:-1] + ("A" if real[-1] != "A" else "B"),  # the signature edited
        value + ":" + signature[::-1],
        signing.dumps({"o": ["id"], "v": [0]}, salt=f"core.pagination:{seeded.url}", key="not-our-secret"),
    ]
    for cursor in forged:
        assert_refused(api.get(seeded.url, {**seeded.params, "cursor": cursor}), "cursor")
    # a cursor of another list (signed by us) is not a position in this one
    other = "/api/compute/pools/" if kind != "pools" else "/api/compute/releases/"
    assert_refused(api.get(other, {"cursor": real}), "cursor")
    assert api.get(seeded.url, {**seeded.params, "cursor": real}).status_code == 200


def test_a_cursor_of_one_rollouts_nodes_is_refused_on_anothers(api, tenant):
    first = seed("rollout-nodes", tenant, 3)
    (second,) = _rollouts(tenant, 1)
    real = _cursor(api.get(first.url, {"limit": 1}).json()["next"])
    assert_refused(api.get(f"/api/compute/rollouts/{second.id}/nodes/", {"cursor": real}), "cursor")


def test_a_signed_cursor_for_another_ordering_is_refused(api, tenant):
    seeded = seed("nodes", tenant, 3)
    stale = signing.dumps({"o": ["created_at", "id"], "v": ["x", "y"]}, salt="core.pagination:/api/compute/nodes/")
    assert_refused(api.get(seeded.url, {"cursor": stale}), "cursor")
    wrong_type = signing.dumps(
        {"o": ["name", "id"], "v": ["n", "not-a-uuid"]}, salt="core.pagination:/api/compute/nodes/"
    )
    assert_refused(api.get(seeded.url, {"cursor": wrong_type}), "cursor")


# --- a page costs the same number of queries whatever the list's length --------------------------
def _queries(api, url: str, params: dict) -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as queries:
        response = api.get(url, params)
    assert response.status_code == 200, response.content[:300]
    return len(queries), response.json()


@pytest.mark.parametrize("kind", LISTS)
def test_a_page_takes_a_constant_number_of_queries(api, tenant, other_tenant, other_api, kind):
    small = seed(kind, tenant, 10)
    few, body = _queries(api, small.url, {**small.params, "limit": 1000})
    assert len(body["results"]) == 10

    # Another tenant's list of 200 (releases are installation-wide: 200 more of them).
    if kind == "releases":
        Release.objects.bulk_create(_release(sequence) for sequence in range(1000, 1200))
        large = Seeded("/api/compute/releases/", {}, small.key, [])
    else:
        large = seed(kind, other_tenant, 200)
    many, body = _queries(other_api, large.url, {**large.params, "limit": 1000})
    assert len(body["results"]) in (200, 210)
    assert many == few

    # A later page (with a cursor) costs what the first one does.
    first, body = _queries(other_api, large.url, {**large.params, "limit": 50})
    later, _ = _queries(other_api, body["next"], {})
    assert later == first == few
