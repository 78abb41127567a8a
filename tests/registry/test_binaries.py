"""Storing binaries (manage.py release upload) and serving them under the downloads URL."""

import hashlib
import threading
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from rollout.models import ReleaseBinary
from rollout.registry.releases import release_register
from tests.factories import binary_bytes, manifest, signed

pytestmark = pytest.mark.django_db

DOWNLOAD = "/api/compute/downloads/bcd/1.0.0/linux-amd64"


@pytest.fixture
def registered():
    return release_register(envelope=signed(manifest("1.0.0", 1))).release


def test_upload_stores_the_right_bytes_and_they_are_served(registered, tmp_path, client):
    path = tmp_path / "bcd"
    path.write_bytes(binary_bytes("1.0.0", "amd64"))
    call_command("release", "upload", "1.0.0", "linux-amd64", str(path))
    assert ReleaseBinary.objects.get(platform="linux-amd64").stored_at is not None
    response = client.get(DOWNLOAD)
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert body == binary_bytes("1.0.0", "amd64")
    assert response["X-Checksum-Sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(binary_bytes("1.0.0", "amd64")[:-1] + b"X", "sha256_mismatch", id="same-size-other-bytes"),
        pytest.param(binary_bytes("1.0.0", "amd64") + b"X", "size_mismatch", id="longer"),
        pytest.param(b"", "size_mismatch", id="empty"),
    ],
)
def test_upload_refuses_wrong_bytes_and_stores_nothing(registered, tmp_path, client, content, message):
    path = tmp_path / "bcd"
    path.write_bytes(content)
    with pytest.raises(CommandError, match=message):
        call_command("release", "upload", "1.0.0", "linux-amd64", str(path))
    assert not default_storage.exists("bcd/1.0.0/linux-amd64")
    assert ReleaseBinary.objects.get(platform="linux-amd64").stored_at is None
    assert client.get(DOWNLOAD).status_code == 404


def test_upload_refuses_unknown_version_platform_or_file(registered, tmp_path):
    path = tmp_path / "bcd"
    path.write_bytes(b"x")
    with pytest.raises(CommandError, match="unknown_binary"):
        call_command("release", "upload", "9.9.9", "linux-amd64", str(path))
    with pytest.raises(CommandError, match="unknown_binary"):
        call_command("release", "upload", "1.0.0", "linux-riscv64", str(path))
    with pytest.raises(CommandError, match="no such file"):
        call_command("release", "upload", "1.0.0", "linux-amd64", str(tmp_path / "missing"))


def test_download_of_a_registered_binary_not_uploaded_is_404(registered, client):
    assert client.get(DOWNLOAD).status_code == 404
    assert client.get("/api/compute/downloads/bcd/..%2F..%2Fetc/linux-amd64").status_code == 404


def test_missing_bytes_are_a_json_404_never_a_500(registered, tmp_path, client):
    path = tmp_path / "bcd"
    path.write_bytes(binary_bytes("1.0.0", "amd64"))
    call_command("release", "upload", "1.0.0", "linux-amd64", str(path))
    default_storage.delete("bcd/1.0.0/linux-amd64")  # lost from storage after the upload
    response = client.get(DOWNLOAD)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert client.get("/api/compute/downloads/bcd/9.9.9/linux-amd64").json()["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_downloads_during_repeated_uploads_are_always_complete(tmp_path):
    """Downloads in threads while the same binary is re-uploaded over and over: every answer is a 200
    with the complete, matching bytes (never a 500, a 404 or a short body)."""
    content = bytes(range(256)) * 4096 * 2  # 2 MiB: writing it takes long enough to be caught mid-way
    binaries = {"linux-amd64": {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}}
    release_register(envelope=signed(manifest("1.0.0", 1, binaries=binaries)))
    path = tmp_path / "bcd"
    path.write_bytes(content)
    call_command("release", "upload", "1.0.0", "linux-amd64", str(path))

    uploads_done = threading.Event()
    outcomes: list[tuple[int, bool]] = []

    def download_loop() -> None:
        client = Client(raise_request_exception=False)
        try:
            while not uploads_done.is_set():
                response = client.get(DOWNLOAD)
                body = b"".join(response.streaming_content) if response.status_code == 200 else b""
                outcomes.append((response.status_code, body == content))
        finally:
            connection.close()

    readers = [threading.Thread(target=download_loop) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(12):
            call_command("release", "upload", "1.0.0", "linux-amd64", str(path))
    finally:
        uploads_done.set()
        for reader in readers:
            reader.join()
    assert len(outcomes) >= 3
    assert set(outcomes) == {(200, True)}
    # No temporary file left behind.
    assert sorted(p.name for p in Path(default_storage.path("bcd/1.0.0")).iterdir()) == ["linux-amd64"]
