"""Uploading a release's binary from its admin page (release_binary_store): stored only when it is the signed
manifest's; a bad platform or a mismatch is refused with a clear message and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from rollout.models import Release, ReleaseBinary
from rollout.registry.releases import release_register
from tests.admin.conftest import staff_client
from tests.admin.test_rollouts import flash
from tests.factories import binary_bytes, manifest, signed

pytestmark = pytest.mark.django_db


@pytest.fixture
def unstored(db) -> Release:
    """bcd 2.0.0, registered (linux-amd64 only) without its binary."""
    return release_register(envelope=signed(manifest("2.0.0", 3, archs=("amd64",)))).release


def upload(client, release: Release, platform: str, data: bytes):
    url = f"/admin/rollout/release/{release.pk}/upload/"
    return client.post(url, {"platform": platform, "binary": SimpleUploadedFile("bcd", data)}, follow=True)


def stored_files() -> list[Path]:
    root = Path(settings.MEDIA_ROOT)
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def test_the_release_page_has_the_upload_form_and_stores_the_signed_bytes(root, unstored):
    page = root.get(f"/admin/rollout/release/{unstored.pk}/change/").content.decode()
    assert 'id="release-binary-upload-form"' in page
    assert 'type="file" name="binary"' in page
    assert '<option value="linux-amd64">' in page

    response = upload(root, unstored, "linux-amd64", binary_bytes("2.0.0", "amd64"))
    assert response.redirect_chain[-1][0] == f"/admin/rollout/release/{unstored.pk}/change/"
    assert "Stored bcd 2.0.0 for linux-amd64" in " ".join(flash(response))
    binary = ReleaseBinary.objects.get(release=unstored)
    assert binary.stored_at is not None
    assert [path.read_bytes() for path in stored_files()] == [binary_bytes("2.0.0", "amd64")]


@pytest.mark.parametrize(
    ("platform", "data", "said"),
    [
        ("linux-arm64", binary_bytes("2.0.0", "arm64"), "bcd 2.0.0 has no binary for linux-arm64"),
        ("linux-amd64", binary_bytes("2.0.0", "amd64")[:-1] + b"!", "sha256_mismatch"),
        ("linux-amd64", binary_bytes("2.0.0", "amd64") + b"more", "size_mismatch"),
    ],
)
def test_a_bad_platform_or_a_mismatch_is_refused_and_nothing_is_stored(root, unstored, platform, data, said):
    response = upload(root, unstored, platform, data)
    said_here = " ".join(flash(response))
    assert "Nothing stored" in said_here
    assert said in said_here
    assert ReleaseBinary.objects.get(release=unstored).stored_at is None
    assert stored_files() == []


def test_a_user_who_may_not_register_releases_sees_no_form_and_cannot_upload(tenant, unstored):
    viewer = staff_client(tenant, "viewer", codenames=("view_release",))
    page = viewer.get(f"/admin/rollout/release/{unstored.pk}/change/")
    assert page.status_code == 200
    assert b"release-binary-upload-form" not in page.content
    assert upload(viewer, unstored, "linux-amd64", binary_bytes("2.0.0", "amd64")).status_code == 403
    assert ReleaseBinary.objects.get(release=unstored).stored_at is None
