"""Storing binaries (manage.py release upload) and serving them under the downloads URL."""

import hashlib

import pytest
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command

from rollout.models import ReleaseBinary
from rollout.services.releases import release_register
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
