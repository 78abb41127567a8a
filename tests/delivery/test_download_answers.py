"""The async front's answer to a download (rollout/api/download_answers.py), in-process: given only with nginx moving
the bytes, only for a binary the process served before whose file is still the one it served, never for a request
with a precondition or another path. Over real HTTP through nginx: test_quick_downloads.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.test import Client

from fleet.plugins import quick_answer
from rollout.api.download_answers import accel_headers
from rollout.registry.binaries import release_binary_served, release_binary_store
from tests.factories import binary_bytes, manifest, release_stored, rollout_settings

pytestmark = pytest.mark.django_db

PATH = "/api/compute/downloads/bcd/1.0.0/linux-amd64"


@pytest.fixture
def accel(settings, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path
    settings.ROLLOUT_DOWNLOADS_OFFLOAD = "accel"
    release_stored(manifest("1.0.0", 1))
    return settings


def test_a_binary_is_the_front_s_once_the_view_served_it(accel):
    assert quick_answer("GET", PATH, {}) is None  # never served here: the view's
    served = Client().get(PATH)
    assert served.status_code == 200
    answer = quick_answer("GET", PATH, {})
    assert answer is not None
    assert (answer.status, answer.body) == (200, b"")
    assert dict(answer.headers) == accel_headers(release_binary_served(version="1.0.0", platform="linux-amd64"))
    assert {name: served[name] for name, _ in answer.headers} == dict(answer.headers)  # the view's own headers
    assert quick_answer("HEAD", PATH, {"range": "bytes=0-1", "if-range": '"x"'}) == answer  # nginx judges those


@pytest.mark.parametrize("precondition", ["if-match", "if-none-match", "if-modified-since", "if-unmodified-since"])
def test_a_precondition_is_the_view_s(accel, precondition):
    Client().get(PATH)
    assert quick_answer("GET", PATH, {precondition: "*"}) is None


def test_other_paths_and_modes_are_the_view_s(accel):
    Client().get(PATH)
    assert quick_answer("GET", "/api/compute/downloads/bcd/1.0.0/linux-arm64", {}) is None  # not served yet
    assert quick_answer("GET", "/api/compute/downloads/bcd/1.0.0", {}) is None
    assert quick_answer("GET", "/api/compute/pools/", {}) is None
    accel.ROLLOUT_DOWNLOADS_OFFLOAD = "none"
    assert quick_answer("GET", PATH, {}) is None


def test_bytes_stored_again_or_gone_are_the_view_s_again(accel):
    Client().get(PATH)
    assert quick_answer("GET", PATH, {}) is not None
    source = io.BytesIO(binary_bytes("1.0.0"))
    release_binary_store(version="1.0.0", platform="linux-amd64", source=source)  # a new file (an atomic rename)
    assert quick_answer("GET", PATH, {}) is None
    Client().get(PATH)
    assert quick_answer("GET", PATH, {}) is not None
    Path(default_storage.path("bcd/1.0.0/linux-amd64")).unlink()
    assert quick_answer("GET", PATH, {}) is None
    assert Client().get(PATH).status_code == 404
