"""Request limits per credential (docs/operations.md#request-limits): a runaway API key or agent token gets
429 ``throttled`` with ``Retry-After`` while every other credential is served; counted in a metric; binary
downloads not counted. Two real web processes count together: tests/fleet/test_request_limits_shared.py."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings
from prometheus_client import REGISTRY

from core.ratelimit import STORE_ERRORS, Rate, RedisCountStore, SlidingWindowLimiter, _retry_after, parse_rate
from demo.processes import free_port, wait_until
from fleet.api.limits import AGENT_TOKEN, API_KEY, agent_token_rate
from tests.conftest import client_for
from tests.fleet.conftest import agent_client, make_node, make_pool

SESSION = "/api/compute/agent/session"
BODY = {"daemonVersion": "1.4.0", "protocolVersion": 3}


def throttled_count(credential: str) -> float:
    return REGISTRY.get_sample_value("api_requests_throttled_total", {"credential": credential}) or 0.0


@pytest.mark.parametrize(
    ("text", "heartbeat", "rate"),
    [
        ("1200/min", None, Rate(1200, 60)),
        ("1200 per minute", None, Rate(1200, 60)),
        ("30/2min", None, Rate(30, 120)),
        ("10/s", None, Rate(10, 1)),
        ("100/hours", None, Rate(100, 3600)),
        ("5/heartbeat", 10, Rate(30, 60)),  # 5 per 10 s, averaged over a minute
        ("5/heartbeat", 7, Rate(42, 60)),  # at most: rounded down
        ("5/heartbeat", 120, Rate(5, 120)),  # an interval longer than a minute is its own window
    ],
)
def test_rates(text, heartbeat, rate):
    assert parse_rate(text, heartbeat_seconds=heartbeat) == rate


@pytest.mark.parametrize("text", ["", "1200", "fast", "0/min", "12/fortnight", "-1/min", "5/2heartbeat", "1/0s"])
def test_bad_rates_are_refused(text):
    with pytest.raises(ValueError, match=r"rate|request"):
        parse_rate(text, heartbeat_seconds=10)


def test_a_rate_per_heartbeat_is_for_agent_tokens_only():
    with pytest.raises(ValueError, match="agent tokens only"):
        parse_rate("5/heartbeat")


def test_the_sliding_window_allows_the_rate_and_says_when_the_next_request_fits():
    limiter, rate, start = SlidingWindowLimiter(None), Rate(10, 60), 6000.0  # 6000 s: a window starts there
    assert [limiter.hit("k", "a", rate, now=start + i) for i in range(10)] == [None] * 10
    wait = limiter.hit("k", "a", rate, now=start + 10)
    assert wait is not None
    assert wait == _retry_after(rate, 10, 10, 0)
    # Not one second earlier, then exactly when it said.
    assert limiter.hit("k", "a", rate, now=start + 10 + wait - 1) is not None
    assert limiter.hit("k", "a", rate, now=start + 10 + wait) is None
    # Another credential was never affected.
    assert limiter.hit("k", "b", rate, now=start + 10) is None


def test_the_previous_window_still_weighs_until_it_has_slid_past():
    limiter, rate = SlidingWindowLimiter(None), Rate(10, 60)
    for i in range(10):
        assert limiter.hit("k", "a", rate, now=6050.0 + i / 10) is None
    # 10 s into the next window the previous one still counts for 50/60 of 10: about 8 more fit, not 10.
    allowed = sum(limiter.hit("k", "a", rate, now=6070.0) is None for _ in range(10))
    assert allowed == 1
    wait = limiter.hit("k", "a", rate, now=6070.0)
    assert limiter.hit("k", "a", rate, now=6070.0 + wait) is None


def test_a_runaway_api_key_gets_429_with_retry_after_and_other_tenants_and_agents_are_served(
    settings, tenant, other_tenant
):
    settings.API_KEY_RATE = "5/min"
    runaway, neighbour, other = (
        client_for(tenant, "loop"),
        client_for(tenant, "ops"),
        client_for(other_tenant, "globex-ops"),
    )
    _, token = make_node(make_pool(tenant, "p"))
    agent = agent_client(token)
    assert agent.post(SESSION, BODY, format="json").status_code == 200
    before = throttled_count(API_KEY)
    assert [runaway.get("/api/compute/pools/").status_code for _ in range(5)] == [200] * 5
    refused = runaway.get("/api/compute/pools/")
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "throttled"
    assert body["retryAfter"] >= 1
    assert refused["Retry-After"] == str(body["retryAfter"])
    assert "API key" in body["detail"]
    assert runaway.post("/api/compute/pools/", {"name": "x"}, format="json").status_code == 429  # nothing written
    assert throttled_count(API_KEY) == before + 2
    # Another key of the same tenant, another tenant's key and the tenant's agents keep their answers.
    assert neighbour.get("/api/compute/pools/").status_code == 200
    assert other.get("/api/compute/pools/").status_code == 200
    assert agent.post(SESSION, BODY, format="json").status_code == 200
    assert [pool["name"] for pool in neighbour.get("/api/compute/pools/").json()["results"]] == ["p"]


def test_a_runaway_agent_is_limited_on_the_plain_heartbeat_path_and_other_nodes_are_not(settings, tenant):
    settings.FLEET_HEARTBEAT_SECONDS = 60  # 5 per heartbeatSeconds: 5 per minute
    pool = make_pool(tenant, "p")
    (_, runaway_token), (_, calm_token) = make_node(pool), make_node(pool)
    runaway, calm = agent_client(runaway_token), agent_client(calm_token)
    assert agent_token_rate() == Rate(5, 60)
    before = throttled_count(AGENT_TOKEN)
    answers = [runaway.post(SESSION, BODY, format="json") for _ in range(6)]
    assert [answer.status_code for answer in answers] == [200] * 5 + [429]
    assert answers[-1].json()["code"] == "throttled"
    assert int(answers[-1]["Retry-After"]) >= 1
    assert "agent token" in answers[-1].json()["detail"]
    # Acks and leaves are the same credential: refused too. The other node is served.
    assert runaway.delete(SESSION).status_code == 429
    assert calm.post(SESSION, BODY, format="json").status_code == 200
    assert throttled_count(AGENT_TOKEN) == before + 2


def test_binary_downloads_are_not_counted(settings, tenant, tmp_path):
    settings.API_KEY_RATE = "1/min"
    settings.MEDIA_ROOT = tmp_path
    runaway = client_for(tenant, "loop")
    assert runaway.get("/api/compute/pools/").status_code == 200
    assert runaway.get("/api/compute/pools/").status_code == 429
    # Past its limit, the same key still gets a download's answer (404: no such binary stored), never 429.
    assert runaway.get("/api/compute/downloads/bcd/1.0.0/linux-amd64").status_code == 404


def test_requests_without_a_credential_are_not_counted(settings, anonymous_api):
    settings.API_KEY_RATE = "1/min"
    assert [anonymous_api.get("/api/compute/pools/").status_code for _ in range(3)] == [401] * 3


def test_a_store_that_is_down_fails_no_request_and_each_process_limits_what_it_sees():
    limiter = SlidingWindowLimiter(RedisCountStore(f"redis://127.0.0.1:{free_port()}/0"))
    errors = STORE_ERRORS._value.get()
    rate = Rate(3, 60)
    try:
        assert [limiter.hit("k", "a", rate, now=6000.0) for _ in range(3)] == [None] * 3
        # The background flush is refused and counted; the counts are kept: the limit holds in this process.
        wait_until(lambda: STORE_ERRORS._value.get() > errors, timeout=10, what="a failed flush")
        assert limiter.hit("k", "a", rate, now=6001.0) is not None
    finally:
        limiter.stop()


@override_settings(API_KEY_RATE="fast", AGENT_TOKEN_RATE="5/fortnight", CACHE_URL="http://cache")
def test_bad_limits_are_system_check_errors():
    from fleet.checks import check_request_limits

    assert [message.id for message in check_request_limits()] == ["fleet.E001", "fleet.E002", "fleet.E003"]


@override_settings(CACHE_URL="")
def test_no_shared_store_is_a_warning_of_check_deploy_only():
    """Once, under ``check --deploy`` (several web processes are a deployment's concern), not on every command."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "fleet.W001" not in out.getvalue()
    call_command("check", deploy=True, stdout=out, stderr=out)
    assert out.getvalue().count("fleet.W001") == 1


class RecordingStore:
    """A store that adds in memory and records each flush's buckets."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.flushes: list[list[str]] = []

    def add(self, increments, reads):
        self.flushes.append([bucket for bucket, _, _ in increments])
        for bucket, count, _ in increments:
            self.totals[bucket] = self.totals.get(bucket, 0) + count
        return [self.totals[bucket] for bucket, _, _ in increments], [self.totals.get(b, 0) for b in reads]


def test_lone_requests_far_from_the_limit_share_a_flush_and_bursts_do_not_wait():
    """A credential's lone request under half its limit reaches the store within LAZY_FLUSH_SECONDS, sharing a
    pipeline with others; a second request of the same credential before the flush (a burst), or any request
    from half its limit on, is flushed within FLUSH_SECONDS."""
    store = RecordingStore()
    limiter = SlidingWindowLimiter(store)
    rate = Rate(20, 60)

    def paced(keys: list[str]) -> int:
        """One request per key, 30 ms apart; the flushes that carried them, once all are in the store."""
        flushes, stored = len(store.flushes), sum(store.totals.values())
        for key in keys:
            assert limiter.hit("k", key, rate) is None
            time.sleep(0.03)
        wait_until(lambda: sum(store.totals.values()) == stored + len(keys), timeout=5, what="the counts stored")
        return len(store.flushes) - flushes

    try:
        assert paced([f"agent-{n}" for n in range(9)]) <= 3  # lone requests: a quarter of a second per flush
        assert paced(["burst"] * 8) >= 4  # the same credential again before its flush: at once, every other one
        assert paced(["burst"] * 8) >= 6  # from half its limit (10 of 20) on: each at once
    finally:
        limiter.stop()
