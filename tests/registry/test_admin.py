"""The admin's register form shows the API's errors; releases are immutable there."""

import pytest
from django.contrib.auth import get_user_model

from rollout.models import Release
from tests.factories import manifest, signed

pytestmark = pytest.mark.django_db

REGISTER = "/admin/rollout/release/register/"


@pytest.fixture
def staff(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def test_paste_an_envelope_registers_it(staff):
    response = staff.post(REGISTER, {"envelope_text": signed(manifest("1.0.0", 1)).decode()})
    assert response.status_code == 302
    release = Release.objects.get()
    assert response["Location"].endswith(f"/admin/rollout/release/{release.pk}/change/")
    page = staff.get(response["Location"])
    assert b"1.0.0" in page.content
    assert release.signer_pins[0].encode() in page.content


def test_upload_an_envelope_file(staff, tmp_path):
    path = tmp_path / "RELEASE.json"
    path.write_bytes(signed(manifest("1.0.0", 1)))
    with path.open("rb") as handle:
        assert staff.post(REGISTER, {"envelope_file": handle}).status_code == 302
    assert Release.objects.count() == 1


def test_a_refused_envelope_shows_the_api_code_and_writes_nothing(staff):
    response = staff.post(REGISTER, {"envelope_text": signed(manifest(product="other")).decode()})
    assert response.status_code == 200
    assert b"wrong_product" in response.content
    assert not Release.objects.exists()


def test_releases_cannot_be_added_changed_or_deleted_in_the_admin(staff):
    staff.post(REGISTER, {"envelope_text": signed(manifest("1.0.0", 1)).decode()})
    release = Release.objects.get()
    assert staff.get("/admin/rollout/release/add/").status_code == 403
    assert staff.post(f"/admin/rollout/release/{release.pk}/delete/", {"post": "yes"}).status_code == 403
    staff.post(f"/admin/rollout/release/{release.pk}/change/", {"version": "6.6.6"})
    release.refresh_from_db()
    assert release.version == "1.0.0"
    listing = staff.get("/admin/rollout/release/")
    assert b"Register a signed release" in listing.content
