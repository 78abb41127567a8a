"""The rules on request bodies (docs/api.md#errors), endpoint by endpoint: a body over 1 MiB is 413 ``too_large``
without being read whole; deep nesting, lone surrogates, NaN and non-object JSON are 400, never a 500."""

from __future__ import annotations

import io
import json

import pytest
from rest_framework.renderers import JSONRenderer

from core.errors import InvalidInput
from core.exceptions import exception_handler
from core.middleware import MAX_BODY_BYTES
from core.parsers import MAX_DEPTH, check_json_value, loads_strict, scrub_surrogates
from rollout.models import Rollout

pytestmark = pytest.mark.django_db

# (method, URL template, client): every endpoint, with or without a body.
ENDPOINTS = [
    ("get", "/api/compute/pools/", "api"),
    ("post", "/api/compute/pools/", "api"),
    ("get", "/api/compute/pools/{pool}/", "api"),
    ("get", "/api/compute/nodes/", "api"),
    ("post", "/api/compute/nodes/", "api"),
    ("get", "/api/compute/nodes/{node}/", "api"),
    ("get", "/api/compute/workflows/", "api"),
    ("post", "/api/compute/workflows/", "api"),
    ("get", "/api/compute/workflows/{workflow}/", "api"),
    ("post", "/api/compute/workflows/{workflow}/finish/", "api"),
    ("get", "/api/compute/releases/", "api"),
    ("post", "/api/compute/releases/", "api"),
    ("get", "/api/compute/rollouts/", "api"),
    ("post", "/api/compute/rollouts/", "api"),
    ("post", "/api/compute/rollouts/?dryRun=true", "api"),
    ("get", "/api/compute/rollouts/{rollout}/", "api"),
    ("get", "/api/compute/rollouts/{rollout}/nodes/", "api"),
    ("get", "/api/compute/rollouts/{rollout}/events/", "api"),
    ("post", "/api/compute/rollouts/{rollout}/pause/", "api"),
    ("post", "/api/compute/rollouts/{rollout}/resume/", "api"),
    ("post", "/api/compute/rollouts/{rollout}/abort/", "api"),
    ("post", "/api/compute/agent/session", "agent"),
    ("delete", "/api/compute/agent/session", "agent"),
    ("post", "/api/compute/agent/commands/{command}/ack", "agent"),
]
# The endpoints that parse a JSON object.
JSON_ENDPOINTS = [
    ("/api/compute/pools/", "api"),
    ("/api/compute/nodes/", "api"),
    ("/api/compute/workflows/", "api"),
    ("/api/compute/rollouts/", "api"),
    ("/api/compute/rollouts/?dryRun=true", "api"),
    ("/api/compute/rollouts/{rollout}/abort/", "api"),
    ("/api/compute/agent/session", "agent"),
    ("/api/compute/agent/commands/{command}/ack", "agent"),
]


def ids(rows):
    return [" ".join(row[:2]) if len(row) == 3 else row[0] for row in rows]


class Unreadable(io.RawIOBase):
    """A request body that fails the test if anything reads it."""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was read")


class Endless(io.RawIOBase):
    """A body without a declared length (chunked): ``size`` bytes of "[", counting what is read."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        self.left -= size
        self.consumed += size
        return b"[" * size


def post_json(client, url: str, raw: bytes | str):
    body = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return client.generic("POST", url, body, content_type="application/json")


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:300]
    body = json.loads(response.content)
    assert body["code"] == code, body
    assert isinstance(body["detail"], str)
    assert body["detail"]
    return body


# --- 1. size --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url", "who"), ENDPOINTS, ids=ids(ENDPOINTS))
def test_a_declared_length_over_1_mib_is_413_before_anything_reads_the_body(world, method, url, who):
    response = world.client(who).generic(
        method.upper(),
        world.url(url),
        content_type="application/json",
        CONTENT_LENGTH=str(8 << 30),  # 8 GiB announced; the stream explodes when read
        **{"wsgi.input": Unreadable()},
    )
    assert_error(response, 413, "too_large")


@pytest.mark.parametrize(("method", "url", "who"), ENDPOINTS, ids=ids(ENDPOINTS))
def test_a_body_without_length_is_read_at_most_1_mib_and_one_byte(world, method, url, who):
    """A chunked body (gunicorn marks its input terminated and gives no CONTENT_LENGTH)."""
    stream = Endless(5 * MAX_BODY_BYTES)
    response = world.client(who).generic(
        method.upper(),
        world.url(url),
        content_type="application/json",
        **{"wsgi.input": stream, "wsgi.input_terminated": True},
    )
    assert_error(response, 413, "too_large")
    assert stream.consumed == MAX_BODY_BYTES + 1


def test_a_body_without_length_under_the_limit_is_read_as_if_declared(world):
    heartbeat = json.dumps({"daemonVersion": "1.4.0", "protocolVersion": 3}).encode()
    response = world.agent.generic(
        "POST",
        "/api/compute/agent/session",
        content_type="application/json",
        **{"wsgi.input": io.BytesIO(heartbeat), "wsgi.input_terminated": True},
    )
    assert response.status_code == 200, response.content
    assert response.json()["heartbeatSeconds"] == 10


@pytest.mark.parametrize(("url", "who"), JSON_ENDPOINTS, ids=ids(JSON_ENDPOINTS))
def test_exactly_1_mib_is_parsed_and_one_byte_more_is_413(world, url, who):
    head = b'{"unknownPadding": "'
    padding = b"x" * (MAX_BODY_BYTES - len(head) - 2)
    body = head + padding + b'"}'
    assert len(body) == MAX_BODY_BYTES
    refused = assert_error(post_json(world.client(who), world.url(url), body), 400, "invalid_input")
    assert "unknownPadding" in refused["detail"]
    assert_error(post_json(world.client(who), world.url(url), body + b" "), 413, "too_large")


def test_a_release_envelope_over_1_mib_is_413(world):
    assert_error(post_json(world.api, "/api/compute/releases/", b" " * (MAX_BODY_BYTES + 1)), 413, "too_large")


def test_a_malformed_content_length_is_400(world):
    response = world.agent.generic(
        "POST", "/api/compute/agent/session", b"{}", content_type="application/json", CONTENT_LENGTH="-1"
    )
    assert_error(response, 400, "invalid_input")


def test_admin_form_posts_are_limited_to_1_mib(settings):
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == MAX_BODY_BYTES


# --- 2. nesting -----------------------------------------------------------------------------------------

DEEP = [
    pytest.param("[" * 100_000 + "]" * 100_000, id="100k-lists"),
    pytest.param('{"a":' * 50_000 + "1" + "}" * 50_000, id="50k-objects"),
    pytest.param('{"name": ' + "[" * 900 + "]" * 900 + "}", id="900-under-the-interpreter-limit"),
    pytest.param('{"name": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}", id="just-over-the-limit"),
]


@pytest.mark.parametrize("body", DEEP)
@pytest.mark.parametrize(("url", "who"), JSON_ENDPOINTS, ids=ids(JSON_ENDPOINTS))
def test_deep_nesting_is_400_invalid_json(world, url, who, body):
    assert_error(post_json(world.client(who), world.url(url), body), 400, "invalid_json")


def test_nesting_up_to_the_limit_is_accepted_by_the_parser():
    assert loads_strict(("[" * MAX_DEPTH + "]" * MAX_DEPTH).encode()) is not None
    with pytest.raises(ValueError, match="nested deeper"):
        loads_strict(("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode())


# --- 3. lone surrogates -----------------------------------------------------------------------------------

SURROGATES = [
    ("/api/compute/pools/", "api", '{"name": "p1", "\\ud800": 1}'),
    ("/api/compute/pools/", "api", '{"name": "p\\udc00"}'),
    ("/api/compute/rollouts/", "api", '{"version": "1.0.0", "\\ud800": 1}'),
    ("/api/compute/rollouts/", "api", '{"version": "1.0.0", "poolIds": ["\\udfff"]}'),
    ("/api/compute/workflows/", "api", '{"kind": "\\ud800"}'),
    ("/api/compute/workflows/", "api", '{"nodeId": "\\ud800", "kind": "remediation"}'),
    ("/api/compute/rollouts/{rollout}/abort/", "api", '{"\\ud800": true}'),
    ("/api/compute/agent/session", "agent", '{"daemonVersion": "\\udbff", "protocolVersion": 3}'),
    ("/api/compute/agent/commands/{command}/ack", "agent", '{"ok": false, "error": "x\\ud800"}'),
]


@pytest.mark.parametrize(("url", "who", "body"), SURROGATES, ids=[row[2] for row in SURROGATES])
def test_a_lone_surrogate_is_400_invalid_json(world, url, who, body):
    assert_error(post_json(world.client(who), world.url(url), body), 400, "invalid_json")


def test_a_surrogate_pair_is_text_and_an_unknown_key_made_of_one_is_echoed(world):
    response = post_json(world.api, "/api/compute/pools/", '{"name": "p1", "\\ud83d\\ude00": 1}')
    body = assert_error(response, 400, "invalid_input")
    assert "\U0001f600" in body["errors"]


def test_an_error_echoing_a_lone_surrogate_still_renders():
    response = exception_handler(InvalidInput("No pool 'a\ud800b'.", code="unknown_pool", ids=["\udfff"]), {})
    rendered = json.loads(JSONRenderer().render(response.data))
    assert rendered == {"code": "unknown_pool", "detail": "No pool 'a\\ud800b'.", "ids": ["\\udfff"]}


def test_scrub_and_check_reach_keys_and_nested_values():
    assert scrub_surrogates({"\ud800": [("ok", "\udfff")]}) == {"\\ud800": [["ok", "\\udfff"]]}
    for value in ({"\ud800": 1}, {"a": [{"b": "\udc00"}]}):
        with pytest.raises(ValueError, match="surrogate"):
            check_json_value(value)
    check_json_value({"emoji \U0001f600": ["\U0001f600"]})


# --- 4. not an object, and other refusals of the parser ---------------------------------------------------

NOT_OBJECTS = ["[]", '[{"rollback": true}]', '"text"', "3", "null", "true"]


@pytest.mark.parametrize("body", NOT_OBJECTS)
@pytest.mark.parametrize(("url", "who"), JSON_ENDPOINTS, ids=ids(JSON_ENDPOINTS))
def test_a_body_that_is_not_an_object_is_400(world, url, who, body):
    assert_error(post_json(world.client(who), world.url(url), body), 400, "invalid_input")


@pytest.mark.parametrize("body", NOT_OBJECTS)
def test_abort_never_takes_a_non_object_as_empty(world, body):
    assert_error(post_json(world.api, world.url("/api/compute/rollouts/{rollout}/abort/"), body), 400, "invalid_input")
    world.rollout.refresh_from_db()
    assert world.rollout.state == Rollout.State.ACTIVE


def test_abort_refuses_unknown_fields(world):
    body = assert_error(
        post_json(world.api, world.url("/api/compute/rollouts/{rollout}/abort/"), '{"rollbak": true}'),
        400,
        "invalid_input",
    )
    assert "rollbak" in body["errors"]


def test_actions_without_a_body_still_accept_an_empty_one(world):
    for action in ("pause", "resume"):
        response = world.api.post(world.url(f"/api/compute/rollouts/{{rollout}}/{action}/"))
        assert response.status_code == 200, response.content
    abort = world.url("/api/compute/rollouts/{rollout}/abort/")
    response = world.api.generic("POST", abort, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "aborted"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"maxFailureRatio": NaN, "version": "1.0.0"}', id="NaN"),
        pytest.param(b'{"maxFailureRatio": -Infinity, "version": "1.0.0"}', id="-Infinity"),
        pytest.param(b'{"maxFailureRatio": 1e999, "version": "1.0.0"}', id="overflow"),
        pytest.param(b'{"soakSeconds": 1' + b"0" * 5000 + b', "version": "1.0.0"}', id="5000-digits"),
        pytest.param(b'{"version": "1.0.0\xff"}', id="not-utf-8"),
        pytest.param(b'{"version": "1.0.0"', id="truncated"),
        pytest.param(b"\xef\xbb\xbf{}", id="bom"),
    ],
)
def test_other_malformed_json_is_400_invalid_json(world, body):
    assert_error(post_json(world.api, "/api/compute/rollouts/", body), 400, "invalid_json")
