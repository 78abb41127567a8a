"""Delivering one webhook POST to real receivers on 127.0.0.1 (no external network)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import itertools
import json
import time

import pytest

from rollout.webhooks.safety import Target
from rollout.webhooks.transport import (
    MAX_ATTEMPTS,
    USER_AGENT,
    DeliveryResult,
    headers_for,
    post_event,
    post_pinned,
    retry_delay,
    sign,
    verify,
)

SECRET = "s3cret-s3cret-s3cret"
BODY = json.dumps({"id": "d-1", "event": "rollout.created", "data": {}}).encode()
LOOPBACK = ipaddress.ip_address("127.0.0.1")


def test_sign_matches_a_hand_computed_hmac():
    # The HMAC-SHA256 test vector published with RFC 2104 implementations (key "key").
    message = b"The quick brown fox jumps over the lazy dog"
    expected = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
    assert sign("key", message) == expected
    assert sign(SECRET, BODY) == "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    assert verify("key", message, expected)
    assert not verify("key", message + b" ", expected)


def test_headers_for():
    assert headers_for("rollout.paused", "d-9", "sha256=ab") == {
        "Content-Type": "application/json",
        "X-Rollout-Event": "rollout.paused",
        "X-Rollout-Delivery": "d-9",
        "X-Rollout-Signature": "sha256=ab",
        "User-Agent": USER_AGENT,
    }


def test_retry_schedule():
    delays = [retry_delay(attempt) for attempt in range(1, MAX_ATTEMPTS)]
    assert delays[0] <= 60
    assert sum(delays) >= 24 * 3600
    assert max(delays) == 3600
    assert delays == sorted(delays)
    assert all(later in (earlier * 2, 3600) for earlier, later in itertools.pairwise(delays))
    assert delays[:8] == [30, 60, 120, 240, 480, 960, 1920, 3600]
    assert sum(delays[:-1]) < 24 * 3600  # no attempt more than needed
    assert retry_delay(10_000) == 3600
    assert retry_delay(0) == retry_delay(1)


def _post(url: str, *, allow_http: bool = True, timeout: float = 5.0, **kwargs) -> DeliveryResult:
    headers = headers_for("rollout.created", "d-1", sign(SECRET, BODY))
    return post_event(url, BODY, headers, allow_http=allow_http, timeout=timeout, **kwargs)


def test_2xx_is_delivered_with_headers_and_a_valid_signature(serve):
    receiver = serve(status=204)
    result = _post(receiver.url("/hooks/1?x=1"))
    assert result == DeliveryResult(ok=True, status_code=204, error=None)
    (got,) = receiver.requests
    assert got.method == "POST"
    assert got.path == "/hooks/1?x=1"
    assert got.body == BODY
    assert got.headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Rollout-Event"] == "rollout.created"
    assert got.headers["X-Rollout-Delivery"] == "d-1"
    assert got.headers["User-Agent"] == USER_AGENT
    assert verify(SECRET, got.body, got.headers["X-Rollout-Signature"])


def test_500_is_not_delivered(serve):
    receiver = serve(status=500)
    assert _post(receiver.url()) == DeliveryResult(ok=False, status_code=500, error="HTTP 500")
    assert len(receiver.requests) == 1


def test_redirect_is_not_followed(serve):
    target = serve(status=200)
    receiver = serve(status=307, answer_headers={"Location": target.url("/elsewhere")})
    result = _post(receiver.url())
    assert result.ok is False
    assert result.status_code == 307
    assert len(receiver.requests) == 1
    assert target.requests == []


def test_refused_connection(closed_port):
    result = _post(f"http://127.0.0.1:{closed_port}/hook")
    assert result.ok is False
    assert result.status_code is None
    assert result.error.startswith("connect:")


def test_a_receiver_that_never_answers_times_out_in_bounded_time(silent_port):
    started = time.monotonic()
    result = _post(f"http://127.0.0.1:{silent_port}/hook", timeout=0.5)
    elapsed = time.monotonic() - started
    assert result == DeliveryResult(ok=False, status_code=None, error="timeout")
    assert 0.45 <= elapsed < 2.0


def test_a_handler_that_hangs_times_out(serve):
    receiver = serve(hang=True)
    started = time.monotonic()
    result = _post(receiver.url(), timeout=0.5)
    assert result == DeliveryResult(ok=False, status_code=None, error="timeout")
    assert time.monotonic() - started < 2.0
    assert len(receiver.requests) == 1  # it got the request; no answer means not delivered


def test_the_timeout_bounds_the_whole_exchange_not_each_read(trickle_port):
    """Each byte arrives well within the timeout; the overall deadline still ends the exchange."""
    started = time.monotonic()
    result = _post(f"http://127.0.0.1:{trickle_port}/hook", timeout=0.5)
    elapsed = time.monotonic() - started
    assert result == DeliveryResult(ok=False, status_code=None, error="timeout")
    assert 0.45 <= elapsed < 2.0


def test_loopback_refused_without_the_flag(serve):
    receiver = serve(status=200)
    for url in (receiver.url(), receiver.url(host="localhost"), f"https://127.0.0.1:{receiver.port}/hook"):
        result = _post(url, allow_http=False)
        assert result.ok is False
        assert result.status_code is None
        assert result.error.startswith("invalid_url:")
    assert receiver.requests == []


@pytest.mark.parametrize(
    "url",
    ["", "not a url", "https://\udcff/", "http://169.254.169.254/latest", "https://user:pw@x.example/", None],
)
def test_post_event_never_raises_on_bad_urls(url):
    result = _post(url)
    assert result.ok is False
    assert result.error.startswith("invalid_url:")


def test_bad_header_values_do_not_raise(serve):
    receiver = serve(status=200)
    result = post_event(receiver.url(), BODY, {"X-Bad": "caf\u00e9\u20ac\n"}, allow_http=True, timeout=2)
    assert result.ok is False
    assert result.error.startswith("error:")
    assert receiver.requests == []


def test_the_connection_goes_to_the_pinned_address_with_the_original_host(serve):
    """The name is never resolved again: hook.invalid does not exist, yet the checked address answers."""
    receiver = serve(status=200)
    target = Target(scheme="http", host="hook.invalid", port=receiver.port, target="/p?q=1", ip=None)
    result = post_pinned(target, [LOOPBACK], BODY, {"Host": "evil.example"}, timeout=2)
    assert result.ok is True
    (got,) = receiver.requests
    assert got.headers["Host"] == f"hook.invalid:{receiver.port}"  # the caller cannot override it
    assert got.path == "/p?q=1"


def test_the_next_checked_address_is_tried_when_one_refuses(serve):
    receiver = serve(status=200)  # listens on 127.0.0.1 only, so 127.0.0.2 refuses
    target = Target(scheme="http", host="hook.invalid", port=receiver.port, target="/", ip=None)
    result = post_pinned(target, [ipaddress.ip_address("127.0.0.2"), LOOPBACK], BODY, {}, timeout=2)
    assert result.ok is True
    assert len(receiver.requests) == 1


def test_https_to_a_pinned_address_uses_the_host_name_for_sni_and_the_certificate(serve, pki, tmp_path):
    receiver = serve(status=200, tls=pki.server_context(tmp_path))
    target = Target(scheme="https", host="hook.test", port=receiver.port, target="/tls", ip=None)
    result = post_pinned(target, [LOOPBACK], BODY, {}, timeout=2, ssl_context=pki.client_context())
    assert result == DeliveryResult(ok=True, status_code=200, error=None)
    assert receiver.sni == ["hook.test"]
    assert receiver.requests[0].headers["Host"] == f"hook.test:{receiver.port}"


def test_https_end_to_end_with_a_trusted_ca(serve, pki, tmp_path):
    receiver = serve(status=202, tls=pki.server_context(tmp_path))
    result = _post(receiver.url(host="localhost"), ssl_context=pki.client_context())
    assert result == DeliveryResult(ok=True, status_code=202, error=None)
    assert receiver.sni == ["localhost"]


def test_https_certificate_for_another_name_is_refused(serve, pki, tmp_path):
    receiver = serve(status=200, tls=pki.server_context(tmp_path))
    target = Target(scheme="https", host="other.test", port=receiver.port, target="/", ip=None)
    result = post_pinned(target, [LOOPBACK], BODY, {}, timeout=2, ssl_context=pki.client_context())
    assert result.ok is False
    assert result.error.startswith("tls:")
    assert receiver.requests == []


def test_https_untrusted_certificate_is_refused(serve, pki, tmp_path):
    receiver = serve(status=200, tls=pki.server_context(tmp_path))
    result = _post(receiver.url(host="localhost"))  # the default trust store does not know the test CA
    assert result.ok is False
    assert result.error.startswith("tls:")
    assert receiver.requests == []
