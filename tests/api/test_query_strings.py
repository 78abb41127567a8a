"""What a query string may not carry under /api/ is a JSON 400, never a 500 nor Django's HTML page: each parameter
is refused by the rule that reads it (a text filter holding a NUL: fleet/api/params.py ``query_text``)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "url",
    [
        "/api/compute/nodes/?daemonVersion=a%00b",  # a filter with no NUL guard of its own
        "/api/compute/nodes/?poolId=%00",
        "/api/compute/rollouts/?state=active%00",
        "/api/compute/audit/?action=x%00",
    ],
)
def test_a_nul_in_the_query_string_is_400_invalid_input(api, url):
    response = api.get(url)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"


def test_a_nul_in_a_selector_is_invalid_selector_saying_where(api):
    """The selector's own rule answers (docs/api.md#selectors), not a generic refusal of the query string."""
    response = api.get("/api/compute/nodes/?selector=ring%3Da%00b")
    assert response.status_code == 400, response.content
    assert (response.json()["code"], response.json()["position"]) == ("invalid_selector", 5)


def test_a_percent_sign_that_encodes_no_nul_is_a_filter_as_any(api):
    assert api.get("/api/compute/nodes/?daemonVersion=%2500").status_code == 200  # the text "%00"


def test_more_query_parameters_than_django_reads_is_the_apis_400(api):
    query = "&".join(f"a{index}=1" for index in range(1100))
    response = api.get(f"/api/compute/pools/?{query}")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "invalid_input"
