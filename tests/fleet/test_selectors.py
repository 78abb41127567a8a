"""Label selectors (docs/api.md#selectors): each operator, the parser against a reference evaluator, bad input.

The reference evaluator below is written from the rules, independently of fleet/selectors.py and of the SQL the
selector compiles to: hypothesis builds requirements as data, writes them as text (spacing and ``=``/``==``
varied), and the database's answer to the parsed, compiled selector must be the reference's answer.
"""

from __future__ import annotations

import random
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.models import Node
from fleet.selectors import MAX_SELECTOR_BYTES, SelectorError, selector_parse
from fleet.services.labels import node_selector_q
from tests.fleet.conftest import make_nodes

pytestmark = pytest.mark.django_db

NODES = "/api/compute/nodes/"
KEYS = ["a", "b", "example.com/c"]
VALUES = ["", "x", "y"]


def reference(requirement: tuple[str, str, tuple[str, ...]], labels: dict[str, str]) -> bool:
    key, op, values = requirement
    if op == "exists":
        return key in labels
    if op == "absent":
        return key not in labels
    if op in ("=", "=="):
        return key in labels and labels[key] == values[0]
    if op == "!=":
        return key not in labels or labels[key] != values[0]
    if op == "in":
        return key in labels and labels[key] in values
    assert op == "notin"
    return key not in labels or labels[key] not in values


def written(requirement: tuple[str, str, tuple[str, ...]], space: str) -> str:
    key, op, values = requirement
    if op == "exists":
        return f"{space}{key}{space}"
    if op == "absent":
        return f"{space}!{space}{key}{space}"
    if op in ("in", "notin"):
        return f"{space}{key} {op}{space}({space}{f'{space},{space}'.join(values)}{space}){space}"
    return f"{space}{key}{space}{op}{space}{values[0]}{space}"


requirements = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from(["exists", "absent", "=", "==", "!=", "in", "notin"]),
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=3).map(tuple),
)


@pytest.fixture
def labelled(pool):
    """30 nodes with every mix of the keys and values (seeded), and their labels."""
    rng = random.Random(7)
    nodes = make_nodes(pool, 30)
    labels = {}
    for node in nodes:
        node_labels = {key: rng.choice(VALUES) for key in KEYS if rng.random() < 0.6}
        labels[node.pk] = node_labels
        Node.objects.filter(pk=node.pk).update(labels=node_labels)
    return labels


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requirements, max_size=4), st.sampled_from(["", " ", "  ", "\t"]))
def test_the_database_agrees_with_the_reference_evaluator(labelled, reqs, space):
    text = ",".join(written(requirement, space) for requirement in reqs)
    expected = {pk for pk, labels in labelled.items() if all(reference(r, labels) for r in reqs)}
    got = set(Node.objects.filter(node_selector_q(text)).values_list("pk", flat=True))
    assert got == expected, text
    # The parsed form, written back, is the same selector.
    assert selector_parse(str(selector_parse(text))) == selector_parse(text)


# --- each operator, through the API --------------------------------------------------------------
@pytest.fixture
def ring(pool):
    nodes = make_nodes(pool, 5)
    for node, labels in zip(
        nodes,
        [{"ring": "canary", "zone": "a"}, {"ring": "main", "zone": "b"}, {"ring": ""}, {"zone": "a"}, {}],
        strict=True,
    ):
        Node.objects.filter(pk=node.pk).update(labels=labels)
    return [node.name for node in nodes]


@pytest.mark.parametrize(
    ("selector", "indexes"),
    [
        ("ring=canary", [0]),
        ("ring==canary", [0]),
        ("ring!=canary", [1, 2, 3, 4]),
        ("ring in (canary, main)", [0, 1]),
        ("ring notin (canary,main)", [2, 3, 4]),
        ("ring", [0, 1, 2]),
        ("!ring", [3, 4]),
        ("ring=", [2]),
        ("ring in ()", [2]),
        ("ring, zone=a", [0]),
        (" zone = a , !ring ", [3]),
        ("", [0, 1, 2, 3, 4]),
        ("   ", [0, 1, 2, 3, 4]),
    ],
)
def test_each_operator_through_the_node_list(api, ring, selector, indexes):
    response = api.get(NODES, {"selector": selector})
    assert response.status_code == 200, response.json()
    assert sorted(node["name"] for node in response.json()["results"]) == sorted(ring[i] for i in indexes)


def test_the_selector_combines_with_the_pool_filter_and_pages(api, pool, ring):
    response = api.get(NODES, {"selector": "ring", "poolId": str(pool.id), "limit": 2})
    assert len(response.json()["results"]) == 2
    rest = api.get(response.json()["next"]).json()
    assert len(rest["results"]) == 1
    assert rest["next"] is None


@pytest.mark.parametrize(
    ("selector", "position"),
    [
        ("ring in (a", 10),
        ("ring in a)", 8),
        ("ring=canary,", 12),
        ("ring=canary zone=a", 12),
        ("ring > 1", 5),
        ("ring=a=b", 6),
        ("\uff52\uff49\uff4e\uff47=canary", 0),
        ("ring=can'ary", 5),
        ("!", 1),
        ("(", 0),
        (",", 0),
        ("ring in (a,(b))", 11),
        ("Bad.Prefix/k", 0),
    ],
)
def test_a_bad_selector_is_400_saying_where(api, ring, selector, position):
    response = api.get(NODES, {"selector": selector})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_selector"
    assert body["position"] == position
    assert f"at character {position}" in body["detail"]


def test_a_selector_over_4_kib_is_refused(api, ring):
    fits = ",".join(["ring"] * (MAX_SELECTOR_BYTES // 5)).ljust(MAX_SELECTOR_BYTES)
    assert api.get(NODES, {"selector": fits}).status_code == 200
    response = api.get(NODES, {"selector": fits + "a"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_selector"
    with pytest.raises(SelectorError):
        selector_parse("é" * (MAX_SELECTOR_BYTES // 2 + 1))


# --- garbage never ends in a 500 ---------------------------------------------------------------
_PIECES = [
    "(",
    ")",
    ",",
    "!",
    "=",
    "==",
    "!=",
    "in",
    "notin",
    " ",
    "a",
    "ring",
    "canary",
    "'",
    '"',
    ";",
    "--",
    "/*",
    "' OR 1=1 --",
    "); DROP TABLE fleet_node; --",
    "\x00",
    "\u0131n",  # dotless i: a lookalike of "in"
    "\uff49\uff4e",
    "\uff52\uff49\uff4e\uff47",
    "\u200b",
    "\u00a0",
    "ring\u2260canary",
    "<",
    ">",
    "?",
    "@>",
    "\\",
    "%",
    "_",
]
garbage = st.one_of(
    st.lists(st.sampled_from(_PIECES), max_size=200).map("".join),
    st.integers(1, 700).map(lambda depth: "a in " + "(" * depth + "b" + ")" * (depth - 1)),
    st.text(max_size=300),
    st.integers(1, MAX_SELECTOR_BYTES + 50).map(lambda n: ("k in ((" * n)[: n * 2]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage)
def test_garbage_is_a_400_or_a_list_never_a_500(api, ring, text):
    response = api.get(NODES, {"selector": text})
    assert response.status_code in (200, 400), (text, response.content)
    if response.status_code == 400:
        assert response.json()["code"] in ("invalid_selector", "invalid_input")


@settings(max_examples=300, deadline=None)
@given(garbage)
def test_the_parser_either_parses_or_says_where(text):
    try:
        selector = selector_parse(text)
    except SelectorError as exc:
        position = exc.position
        assert 0 <= position <= len(text)
        return
    assert selector_parse(str(selector)) == selector


# --- served by the index ---------------------------------------------------------------------
def test_the_node_list_with_a_selector_is_served_by_the_gin_index(api, pool):
    nodes = make_nodes(pool, 3000)
    Node.objects.filter(pk__in=[node.pk for node in nodes[::300]]).update(labels={"ring": "canary"})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE fleet_node")
    with CaptureQueriesContext(connection) as queries:
        assert len(api.get(NODES, {"selector": "ring=canary"}).json()["results"]) == 10
    listed = [q["sql"] for q in queries.captured_queries if '"fleet_node"' in q["sql"] and "@>" in q["sql"]]
    assert listed
    for selector_sql in listed:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + selector_sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert not re.search(r"Seq Scan on fleet_node\b(?!session)", plan), plan
        assert "node_labels_gin" in plan, plan
