"""Downloads answered by the async front (rollout's ``download_quick_answer``) through the `make web` tier: the
first download of a binary in a process is Django's, later ones are the front's, with the same answer from nginx;
what the front does not take (preconditions, a body, a Host Django refuses, bytes stored again or gone) stays
Django's."""

from __future__ import annotations

import io
import os
from pathlib import Path

import httpx
import pytest
from django.core.files.storage import default_storage

from rollout.registry.binaries import release_binary_store
from tests.delivery.conftest import Stored, store_release
from tests.metrics import metric_sample

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUICK = "fleet_watch_quick_answers_total"
DATA = os.urandom(20_000)


def quick_answers(url: str) -> int:
    """Requests the tier's front answered for a plug-in (summed over its processes)."""
    return metric_sample(url, QUICK)


def answered_by_front(http: httpx.Client, url: str, method: str, path: str, **headers: str) -> httpx.Response:
    """``method`` on ``path`` until the front answers it (each process's first one is Django's); its answer."""
    for _ in range(30):  # three processes: the kernel gives at least one of them two of these
        before = quick_answers(url)
        response = http.request(method, path, headers=headers)
        if quick_answers(url) > before:
            return response
    raise AssertionError(f"no {method} {path} was answered by the front")


def comparable(response: httpx.Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name not in ("date", "connection")}


@pytest.fixture
def binary(delivery_settings) -> Stored:
    return store_release("3.1.0", DATA, sequence=3)


@pytest.fixture
def http(web_tier):
    with httpx.Client(base_url=web_tier.url, timeout=10) as client:
        yield client


def test_a_download_served_before_is_the_front_s_with_django_s_answer(web_tier, http, binary):
    django = http.get(binary.path)
    assert django.status_code == 200
    front = answered_by_front(http, web_tier.url, "GET", binary.path)
    assert (front.status_code, front.content) == (200, DATA)
    assert comparable(front) == comparable(django)
    head = answered_by_front(http, web_tier.url, "HEAD", binary.path)
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", str(len(DATA)))
    ranged = answered_by_front(http, web_tier.url, "GET", binary.path, Range="bytes=100-199")
    assert (ranged.status_code, ranged.content) == (206, DATA[100:200])
    assert ranged.headers["content-range"] == f"bytes 100-199/{len(DATA)}"
    resumed = answered_by_front(http, web_tier.url, "GET", binary.path, Range="bytes=5-", **{"If-Range": '"other"'})
    assert (resumed.status_code, resumed.content) == (200, DATA)  # nginx judges If-Range against the sha256


def test_preconditions_bodies_and_hosts_django_refuses_are_django_s(web_tier, http, binary):
    answered_by_front(http, web_tier.url, "GET", binary.path)  # every process that answers has it now, or soon
    before = quick_answers(web_tier.url)
    for _ in range(6):
        not_modified = http.get(binary.path, headers={"If-None-Match": f'"{binary.sha256}"'})
        assert not_modified.status_code == 304
        failed = http.get(binary.path, headers={"If-Match": '"other"'})
        assert failed.status_code == 412
        with_body = http.request("GET", binary.path, content=b"x")
        assert (with_body.status_code, with_body.content) == (200, DATA)
        refused_host = http.get(binary.path, headers={"Host": "elsewhere.example"})
        assert refused_host.status_code == 400  # ALLOWED_HOSTS
    assert quick_answers(web_tier.url) == before


def test_bytes_stored_again_or_gone_are_django_s_again(web_tier, http, binary):
    answered_by_front(http, web_tier.url, "GET", binary.path)
    release_binary_store(version=binary.version, platform=binary.platform, source=io.BytesIO(DATA))
    before = quick_answers(web_tier.url)
    again = http.get(binary.path)  # a new file: Django's, whichever process answers
    assert (again.status_code, again.content) == (200, DATA)
    assert quick_answers(web_tier.url) == before
    Path(default_storage.path(f"bcd/{binary.version}/{binary.platform}")).unlink()
    for _ in range(6):
        lost = http.get(binary.path)
        assert lost.status_code == 404
        assert binary.version in lost.json()["detail"]  # Django's words, not nginx's
    assert quick_answers(web_tier.url) == before
