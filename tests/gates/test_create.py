"""Gates at create (docs/api.md#rollouts): what is accepted, and every refusal a 400 invalid_gate writing nothing."""

from __future__ import annotations

import pytest

from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutGate
from tests.factories import fleet

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"
PROM = {"name": "errors", "prometheus": {"query": "sum(rate(errors_total[5m]))", "max": 0.5}}


@pytest.fixture
def prometheus(module_settings):
    module_settings.ROLLOUT_PROMETHEUS_URL = "http://127.0.0.1:9"


def nothing_written() -> bool:
    return not (
        Rollout.objects.exists()
        or NodeUpgrade.objects.exists()
        or RolloutEvent.objects.exists()
        or RolloutGate.objects.exists()
    )


def test_gates_are_stored_with_their_options_an_unreachable_prometheus_inconclusive(api, tenant, releases, prometheus):
    """The create asks each Prometheus gate once: Prometheus (here nothing listens) unreachable does not block it,
    the gate is inconclusive with the error at once; an HTTP gate is pending until the evaluation asks it."""
    fleet(tenant, {"a": (4, "0.5")})
    gates = [PROM, {"name": "health.api-1", "http": {"url": "http://127.0.0.1:8080/health"}}]
    body = {"version": "1.0.0", "gates": gates, "gateIntervalSeconds": 5, "gateFailureLimit": 100}
    response = api.post(URL, body, format="json")
    assert response.status_code == 201, response.content
    shown = response.json()
    assert (shown["gateIntervalSeconds"], shown["gateFailureLimit"]) == (5, 100)
    rollout = Rollout.objects.get()
    stored = list(RolloutGate.objects.filter(rollout=rollout).order_by("position"))
    assert [(g.name, g.kind, g.query, g.maximum, g.url, g.state, g.consecutive_failures) for g in stored] == [
        ("errors", "prometheus", "sum(rate(errors_total[5m]))", 0.5, "", "inconclusive", 0),
        ("health.api-1", "http", "", None, "http://127.0.0.1:8080/health", "pending", 0),
    ]
    listed = api.get(f"{URL}{rollout.id}/gates/")
    assert listed.status_code == 200
    first, second = listed.json()
    assert (first["name"], first["state"], first["value"], first["consecutiveFailures"]) == (
        "errors",
        "inconclusive",
        None,
        0,
    )
    assert first["detail"]  # the provider's error, e.g. "connection refused"
    assert first["at"]
    assert first["onFailure"] == "pause"
    assert second == {
        "name": "health.api-1",
        "state": "pending",
        "value": None,
        "at": None,
        "consecutiveFailures": 0,
        "detail": None,
        "onFailure": "pause",
    }
    assert first["onFailure"] == "pause"


def test_defaults_without_gates(api, tenant, releases):
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0"}, format="json")
    assert response.status_code == 201
    assert (response.json()["gateIntervalSeconds"], response.json()["gateFailureLimit"]) == (30, 3)
    assert api.get(f"{URL}{response.json()['id']}/gates/").json() == []


def test_gates_of_another_tenants_rollout_are_404(api, other_api, tenant, releases):
    fleet(tenant, {"a": (2, "0.5")})
    rollout_id = api.post(URL, {"version": "1.0.0"}, format="json").json()["id"]
    assert other_api.get(f"{URL}{rollout_id}/gates/").status_code == 404


def _http(url: str, name: str = "h") -> dict:
    return {"name": name, "http": {"url": url}}


@pytest.mark.parametrize(
    "gates",
    [
        [{"name": "q", "prometheus": {"query": "x" * 4097, "max": 1}}],  # PromQL over 4 KiB
        [{"name": "q", "prometheus": {"query": "é" * 2049, "max": 1}}],  # 4 KiB counted in bytes
        [{**PROM, "name": f"g{i}"} for i in range(9)],  # more than 8
        [{**PROM, "name": ""}],
        [{**PROM, "name": "x" * 64}],
        [{**PROM, "name": "nul\u0000"}],  # PostgreSQL stores no NUL
        [{**PROM, "name": "two\nlines"}],
        [{"name": "q", "prometheus": {"query": "up\u0000", "max": 1}}],
        [{**PROM, "name": 7}],
        [PROM, PROM],  # the same name twice
        [{"name": "both", "prometheus": PROM["prometheus"], "http": {"url": "http://127.0.0.1:1/"}}],
        [{"name": "neither"}],
        [{"name": "extra", "prometheus": PROM["prometheus"], "severity": "high"}],
        [{"name": "q", "prometheus": {"query": "up"}}],
        [{"name": "q", "prometheus": {"query": "up", "max": "1"}}],
        [{"name": "q", "prometheus": {"query": "up", "max": True}}],
        [{"name": "q", "prometheus": {"query": "", "max": 1}}],
        [{"name": "q", "prometheus": {"query": "up", "max": 1, "url": "http://elsewhere/"}}],  # no other Prometheus
        "not a list",
        [["name", "q"]],
        [_http("https://example.com/health")],  # outside the allowed prefixes
        [_http("http://127.0.0.1.evil.example/x")],  # a prefix is matched as written
        [{"name": "h", "http": {"url": 5}}],
        [{"name": "h", "http": {"url": "http://127.0.0.1:1/", "method": "POST"}}],
    ],
)
def test_bad_gates_are_400_invalid_gate_and_nothing_is_written(api, tenant, releases, prometheus, gates):
    fleet(tenant, {"a": (2, "0.5")})
    for query in ("", "?dryRun=true"):
        response = api.post(URL + query, {"version": "1.0.0", "gates": gates}, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "invalid_gate"
    assert nothing_written()


@pytest.mark.parametrize("name", ["x" * 63, "error rate", "slo:latency-p99", "-starts", "ends.", "ünïcode"])
def test_a_gate_name_is_any_1_to_63_characters(api, tenant, releases, prometheus, name):
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0", "gates": [{**PROM, "name": name}]}, format="json")
    assert response.status_code == 201, response.content
    assert [gate["name"] for gate in api.get(f"{URL}{response.json()['id']}/gates/").json()] == [name]


def test_a_query_of_exactly_4_kib_is_accepted(api, tenant, releases, prometheus):
    fleet(tenant, {"a": (2, "0.5")})
    gates = [{"name": "q", "prometheus": {"query": "x" * 4096, "max": 1}}]
    assert api.post(URL, {"version": "1.0.0", "gates": gates}, format="json").status_code == 201


def test_prometheus_gates_need_the_installations_prometheus(api, tenant, releases):
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0", "gates": [PROM]}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_gate")
    assert "ROLLOUT_PROMETHEUS_URL" in response.json()["detail"]
    assert nothing_written()


def test_without_an_allowlist_http_gates_are_refused(api, tenant, releases, module_settings):
    module_settings.ROLLOUT_GATE_URL_ALLOW = []
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0", "gates": [_http("http://127.0.0.1:1/health")]}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_gate")
    assert nothing_written()


@pytest.mark.parametrize(
    "url",
    [
        "https://vm/health",  # a name that resolves to 127.0.0.1 (/etc/hosts)
        "https://localhost/health",
        "https://10.1.2.3/health",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:127.0.0.1]/health",
        "http://203.0.113.9/health",  # http:// without the switch
    ],
)
def test_urls_resolving_to_internal_addresses_are_refused(api, tenant, releases, module_settings, url):
    """The webhooks' rules (rollout/webhooks/safety.py), at create: the name is resolved and every address judged."""
    module_settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = False
    module_settings.ROLLOUT_GATE_URL_ALLOW = ["https://", "http://"]
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0", "gates": [_http(url)]}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_gate"), response.content
    assert nothing_written()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gateIntervalSeconds", 4),
        ("gateIntervalSeconds", 3601),
        ("gateIntervalSeconds", 30.0),
        ("gateIntervalSeconds", "30"),
        ("gateFailureLimit", 0),
        ("gateFailureLimit", 101),
        ("gateFailureLimit", True),
    ],
)
def test_interval_and_limit_out_of_range_are_400(api, tenant, releases, field, value):
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(URL, {"version": "1.0.0", field: value}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert nothing_written()


def test_the_dry_run_checks_gates_too(api, tenant, releases):
    fleet(tenant, {"a": (2, "0.5")})
    response = api.post(f"{URL}?dryRun=true", {"version": "1.0.0", "gates": [PROM]}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_gate")


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.215.14/health",
        "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/health",
        "https://10.0.0.1/",
        "https://[fd00:ec2::254]/",
        "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
        "https://0x7f.1/",
        "https://user:pw@93.184.215.14/",
        "https://93.184.215.14/#frag",
        "https://93.184.215.14:0/",
        "https://vm/",
        "https://localhost./",
        "http://93.184.215.14/",
    ],
)
def test_an_http_gate_is_refused_exactly_when_a_webhook_would_be(module_settings, url):
    """One implementation: the gate's URL check is the webhooks' shape check and their resolution check."""
    from core.errors import InvalidInput
    from rollout.gates.spec import gate_url_check
    from rollout.webhooks.safety import UnsafeURL, check_url, parse_url, resolve_checked

    module_settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = False
    module_settings.ROLLOUT_GATE_URL_ALLOW = ["https://", "http://"]
    try:
        check_url(url, allow_http=False)
        target = parse_url(url, allow_http=False)
        resolve_checked(target.host, target.port, allow_private=False)
        webhook_refused = False
    except UnsafeURL:
        webhook_refused = True
    if webhook_refused:
        with pytest.raises(InvalidInput) as refused:
            gate_url_check(url, name="h")
        assert refused.value.code == "invalid_gate"
    else:
        assert gate_url_check(url, name="h") == url
