"""GET|HEAD of a binary answers the same through nginx (the web tier, X-Accel-Redirect) and from Django alone.

``django``: pytest-django's live server, ROLLOUT_DOWNLOADS_OFFLOAD=none (Django moves the bytes,
core/ranges.py decides ranges). ``nginx``: the `make web` tier started with the repository's
docker/nginx.conf, offload=accel (Django decides existence and preconditions, nginx moves the bytes).
Every case runs on both, on real HTTP.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from django.core.files.storage import default_storage

from rollout.registry.storage import IMMUTABLE
from tests.delivery.conftest import DOWNLOADS_PATH, Stored, store_release

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SIZE = 10_000
DATA = os.urandom(SIZE)


@pytest.fixture
def binary(delivery_settings) -> Stored:
    return store_release("1.0.0", DATA)


@pytest.fixture
def http(base_url):
    with httpx.Client(base_url=base_url, timeout=10) as client:
        yield client


def assert_representation_headers(response: httpx.Response, binary: Stored) -> None:
    assert response.headers["etag"] == f'"{binary.sha256}"'
    assert response.headers["x-checksum-sha256"] == binary.sha256
    assert response.headers["cache-control"] == IMMUTABLE
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == 'attachment; filename="bcd-1.0.0-linux-amd64"'


def test_get_head_and_ranges(http, binary):
    """200 with the validators; HEAD; every range case. (One test per path: each costs a database flush.)"""
    response = http.get(binary.path)
    assert response.status_code == 200
    assert response.content == DATA
    assert response.headers["content-length"] == str(SIZE)
    assert response.headers["accept-ranges"] == "bytes"
    assert "last-modified" not in response.headers  # only the sha256 validates: the same on every path
    assert_representation_headers(response, binary)

    response = http.head(binary.path)
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["content-length"] == str(SIZE)
    assert response.headers["accept-ranges"] == "bytes"
    assert_representation_headers(response, binary)
    ranged = http.head(binary.path, headers={"Range": "bytes=100-199"})
    assert (ranged.status_code, ranged.content) == (206, b"")
    assert ranged.headers["content-range"] == f"bytes 100-199/{SIZE}"
    assert ranged.headers["content-length"] == "100"

    for range_header, status, span in RANGES:
        response = http.get(binary.path, headers={"Range": range_header})
        assert response.status_code == status, range_header
        if status == 206:
            first, last = span
            assert response.content == DATA[first : last + 1], range_header
            assert response.headers["content-range"] == f"bytes {first}-{last}/{SIZE}"
            assert response.headers["content-length"] == str(last + 1 - first)
            assert_representation_headers(response, binary)
        elif status == 416:
            assert response.headers["content-range"] == f"bytes */{SIZE}", range_header
        else:
            assert response.content == DATA, range_header
            assert "content-range" not in response.headers


# RFC 9110 section 14.1.2's examples on a 10,000-byte representation, then the edge cases where the RFC
# leaves a choice (nginx's, on both paths: docs/api.md#binary-downloads). (Range, status, (first, last)).
RANGES = [
    ("bytes=0-499", 206, (0, 499)),  # the first 500 bytes
    ("bytes=500-999", 206, (500, 999)),  # the second 500 bytes
    ("bytes=-500", 206, (9500, 9999)),  # the final 500 bytes
    ("bytes=9500-", 206, (9500, 9999)),  # the same, open-ended
    ("bytes=0-0,-1", 200, None),  # the first and last bytes: two ranges, so the whole (one range per request)
    ("bytes=500-600,601-999", 200, None),  # the second 500 bytes as two ranges: the whole
    ("bytes=0-99999", 206, (0, 9999)),  # a last position past the end stops at the end
    ("bytes=-99999", 206, (0, 9999)),  # a suffix longer than the file is all of it
    ("bytes=9999-", 206, (9999, 9999)),
    ("BYTES=0-1", 206, (0, 1)),  # the unit is case-insensitive
    ("bytes= 0-1", 206, (0, 1)),
    ("bytes=0-1,5-3", 206, (0, 1)),  # one satisfiable range among empty ones
    (f"bytes={SIZE}-", 416, None),  # starts past the end
    ("bytes=-0", 416, None),  # an empty suffix
    ("bytes=10000-,20000-", 416, None),  # nothing satisfiable
    ("bytes=5-3", 416, None),  # malformed: rejected, as nginx does
    ("bytes=abc", 416, None),
    ("items=0-1", 200, None),  # another unit: ignored
    ("bytes=", 200, None),  # an empty set: ignored
]


def test_conditional_requests(http, binary):
    """If-None-Match answers 304; If-Range resumes only the same bytes, else sends them all."""
    for validator in (f'"{binary.sha256}"', f'W/"{binary.sha256}"', f'"other", "{binary.sha256}"', "*"):
        response = http.get(binary.path, headers={"If-None-Match": validator})
        assert response.status_code == 304, validator
        assert response.content == b""
        assert response.headers["etag"] == f'"{binary.sha256}"'
        assert response.headers["cache-control"] == IMMUTABLE
    assert http.head(binary.path, headers={"If-None-Match": f'"{binary.sha256}"'}).status_code == 304
    changed = http.get(binary.path, headers={"If-None-Match": '"an-older-build"'})
    assert (changed.status_code, changed.content) == (200, DATA)

    same = http.get(binary.path, headers={"Range": "bytes=4000-", "If-Range": f'"{binary.sha256}"'})
    assert same.status_code == 206
    assert same.content == DATA[4000:]
    for stale in ('"0123abcd"', f'W/"{binary.sha256}"', "Tue, 01 Dec 2026 10:00:00 GMT"):
        whole = http.get(binary.path, headers={"Range": "bytes=4000-", "If-Range": stale})
        assert whole.status_code == 200, stale
        assert whole.content == DATA
        assert "content-range" not in whole.headers


def test_refusals(http, binary, delivery_settings):
    """Unknown, not uploaded or lost bytes: the API's JSON 404 (nginx's included); other methods: 405."""
    from rollout.registry.releases import release_register
    from tests.factories import manifest, signed

    release_register(envelope=signed(manifest("2.0.0", 2)))  # registered, never uploaded
    paths = [
        f"{DOWNLOADS_PATH}/bcd/9.9.9/linux-amd64",
        f"{DOWNLOADS_PATH}/bcd/1.0.0/linux-riscv64",
        f"{DOWNLOADS_PATH}/bcd/2.0.0/linux-amd64",
    ]
    for path in paths:
        for method in ("GET", "HEAD"):
            response = http.request(method, path)
            assert response.status_code == 404, (method, path)
            if method == "GET":
                assert response.headers["content-type"] == "application/json"
                assert response.json()["code"] == "not_found"
    Path(default_storage.path("bcd/1.0.0/linux-amd64")).unlink()  # lost from the volume after the upload
    lost = http.get(binary.path, headers={"Range": "bytes=0-1"})
    assert lost.status_code == 404
    assert lost.json()["code"] == "not_found"
    response = http.request("DELETE", binary.path)
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
