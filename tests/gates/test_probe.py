"""Asking a gate against real local servers: every bad answer is inconclusive, never a crash (no database)."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from rollout.gates.probe import MAX_ANSWER_BYTES, TIMEOUT_SECONDS, http_probe, prometheus_probe
from tests.gates.conftest import vector


def test_prometheus_instant_query_is_sent_encoded_to_the_api(serve):
    server = serve(body=vector("0.5"))
    query = 'sum(rate(errors_total{job="api"}[5m])) > 0 or vector(0)'
    outcome = prometheus_probe(server.url + "/prom/", query, maximum=1)
    assert outcome.state == "pass"
    path = urlsplit(server.paths[0])
    assert path.path == "/prom/api/v1/query"
    assert parse_qs(path.query) == {"query": [query]}


@pytest.mark.parametrize(
    ("values", "maximum", "state", "value"),
    [
        ((), 0, "pass", None),  # an empty vector: no alert firing
        (("1", "2.5"), 2.5, "pass", 2.5),  # every sample at most max
        (("1", "2.5"), 2, "fail", 2.5),  # the largest sample is shown
        (("-3",), -1, "pass", -3.0),
        # Prometheus' own values that are no JSON number: judged all the same, shown as null
        (("1", "+Inf"), 1e300, "fail", None),  # histogram_quantile beyond the last bucket: more than any max
        (("-Inf",), -1e300, "pass", None),
        (("0.5", "NaN"), 1, "fail", None),  # NaN <= max is false (a ratio of nothing: write `or vector(0)`)
    ],
)
def test_prometheus_samples_are_judged_against_max(serve, values, maximum, state, value):
    outcome = prometheus_probe(serve(body=vector(*values)).url, "up", maximum=maximum)
    assert (outcome.state, outcome.value) == (state, value)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "why"),
    [
        (b"<html><body>Login</body></html>", "text/html", 200, "not JSON"),
        (vector("1", "lots"), "application/json", 200, "not a number"),
        (
            json.dumps(
                {
                    "status": "success",
                    "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"]]}]},
                }
            ).encode(),
            "application/json",
            200,
            "matrix",
        ),
        (json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}).encode(), "", 200, ""),
        (json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode(), "", 400, "400"),
        (
            json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"value": 3}]}}).encode(),
            "",
            200,
            "",
        ),
        (b"[1, 2]", "application/json", 200, ""),
        (b"", "application/json", 204, ""),
    ],
)
def test_answers_the_api_does_not_promise_are_inconclusive(serve, body, content_type, status, why):
    server = serve(body=body, content_type=content_type or "application/json", status=status)
    outcome = prometheus_probe(server.url, "up", maximum=1)
    assert outcome.state == "inconclusive"
    assert outcome.value is None
    assert why in outcome.detail


def test_twenty_mebibytes_of_json_are_not_read_past_one(serve):
    chunk = b'{"metric":{"job":"' + b"x" * 1000 + b'"},"value":[1,"1"]},'
    server = serve(
        body=b'{"status":"success","data":{"resultType":"vector","result":[',
        chunk=chunk,
        chunks=20 * 1024 * 1024 // len(chunk),
    )
    outcome = prometheus_probe(server.url, "up", maximum=5)
    assert outcome.state == "inconclusive"
    assert "larger than" in outcome.detail
    # The client hung up after 1 MiB: the server's writes fail once the sockets' buffers are full.
    deadline = time.monotonic() + 10
    while not server.sent and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the server's handler to see the closed connection
    assert server.sent
    assert server.sent[0] < MAX_ANSWER_BYTES + 8 * 1024 * 1024


def test_an_answer_thirty_seconds_slow_is_inconclusive_after_the_timeout(serve):
    server = serve(body=vector("0"), hold=True)
    started = time.monotonic()
    outcome = prometheus_probe(server.url, "up", maximum=1)
    elapsed = time.monotonic() - started
    server.release.set()
    assert outcome.state == "inconclusive"
    assert outcome.detail == "timeout"
    assert TIMEOUT_SECONDS - 0.5 <= elapsed < TIMEOUT_SECONDS + 3


def test_a_refused_connection_is_inconclusive():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connecting is refused
    port = sock.getsockname()[1]
    try:
        assert prometheus_probe(f"http://127.0.0.1:{port}", "up", maximum=1).state == "inconclusive"
        assert http_probe(f"http://127.0.0.1:{port}/health", allow_private=True).state == "inconclusive"
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("status", "state"), [(200, "pass"), (204, "pass"), (299, "pass"), (302, "fail"), (503, "fail")]
)
def test_http_gate_passes_on_2xx_only(serve, status, state):
    server = serve(status=status, body=b"ok")
    outcome = http_probe(server.url + "/health?deep=1", allow_private=True)
    assert (outcome.state, outcome.value) == (state, float(status))
    assert server.paths == ["/health?deep=1"]


def test_http_gate_checks_its_address_at_every_ask(serve):
    """The webhooks' rules at evaluation too: without the switch, a loopback address is never called."""
    server = serve(status=200)
    outcome = http_probe(server.url + "/health", allow_private=False)
    assert outcome.state == "inconclusive"
    assert outcome.detail.startswith("invalid_url")
    assert server.paths == []


def test_http_gate_reads_at_most_one_mebibyte(serve):
    server = serve(status=200, chunk=b"x" * 65536, chunks=320)  # 20 MiB
    outcome = http_probe(server.url + "/health", allow_private=True)
    server.release.set()
    assert outcome.state == "pass"
