"""Registering signed releases through the API (docs/api.md#releases)."""

import base64
import json

import pytest

from rollout.models import Release, ReleaseBinary
from tests.factories import bare_signature, manifest, manifest_bytes, pin, raw_envelope, rollout_settings, signed

pytestmark = pytest.mark.django_db

URL = "/api/compute/releases/"


def post(client, body: bytes):
    return client.generic("POST", URL, body, content_type="application/json")


def assert_refused(response, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert response.json()["detail"]
    assert not Release.objects.exists()
    assert not ReleaseBinary.objects.exists()


def test_register_answers_201_with_the_release(api):
    response = post(api, signed(manifest("1.4.0", 7, notes="hello")))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["version"] == "1.4.0"
    assert body["sequence"] == 7
    assert body["product"] == "bcd"
    assert body["protocolVersion"] == 3
    assert set(body["binaries"]) == {"linux-amd64", "linux-arm64"}
    amd64 = body["binaries"]["linux-amd64"]
    assert amd64["url"] == "http://127.0.0.1:8000/api/compute/downloads/bcd/1.4.0/linux-amd64"
    assert amd64["sha256"] == manifest("1.4.0", 7)["binaries"]["linux-amd64"]["sha256"]
    assert body["registeredAt"]
    release = Release.objects.get()
    assert release.signer_pins == [pin(0)]
    assert bytes(release.payload) == manifest_bytes(manifest("1.4.0", 7, notes="hello"))
    assert ReleaseBinary.objects.filter(release=release).count() == 2


def test_same_envelope_twice_is_one_row_201_then_200_same_body(api):
    envelope = signed(manifest("1.0.0", 1))
    first = post(api, envelope)
    second = post(api, envelope)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert Release.objects.count() == 1


def test_same_manifest_signed_again_is_the_same_release(api, settings):
    settings.ROLLOUT = rollout_settings(pins=[pin(0), pin(1)])
    assert post(api, signed(manifest("1.0.0", 1), 0)).status_code == 201
    assert post(api, signed(manifest("1.0.0", 1), 1)).status_code == 200
    assert Release.objects.count() == 1


def test_list_is_newest_sequence_first(api):
    for version, sequence in [("1.0.0", 1), ("1.1.0", 3), ("1.2.0", 5)]:
        assert post(api, signed(manifest(version, sequence))).status_code == 201, version
    assert [r["sequence"] for r in api.get(URL).json()["results"]] == [5, 3, 1]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param(lambda: b"not json", 400, "invalid_envelope", id="not-json"),
        pytest.param(lambda: b"[]", 400, "invalid_envelope", id="not-an-object"),
        pytest.param(
            lambda: raw_envelope(b"{}", []).replace(b'"payload": "e30="', b'"payload": "%%%"'),
            400,
            "invalid_envelope",
            id="bad-base64",
        ),
        pytest.param(
            lambda: raw_envelope(manifest_bytes(manifest()), [bare_signature(manifest_bytes(manifest()), 0, "x")], "x"),
            400,
            "wrong_payload_type",
            id="wrong-payload-type",
        ),
        pytest.param(lambda: signed(b"not json at all"), 400, "invalid_manifest", id="payload-not-json"),
        pytest.param(
            lambda: signed(b'{"product":"bcd","product":"bcd","version":"1.0.0","sequence":1,"binaries":{}}'),
            400,
            "invalid_manifest",
            id="duplicate-keys",
        ),
        pytest.param(lambda: signed(manifest(extra=1)), 400, "invalid_manifest", id="unknown-field"),
        pytest.param(lambda: signed(manifest(sequence=...)), 400, "invalid_manifest", id="missing-sequence"),
        pytest.param(lambda: signed(manifest(product="other")), 400, "wrong_product", id="wrong-product"),
        pytest.param(lambda: signed(manifest(sequence=0)), 400, "invalid_manifest", id="sequence-0"),
        pytest.param(lambda: signed(manifest(sequence=-3)), 400, "invalid_manifest", id="sequence-negative"),
        pytest.param(lambda: signed(manifest(sequence=1.0)), 400, "invalid_manifest", id="sequence-float"),
        pytest.param(lambda: signed(manifest(sequence=True)), 400, "invalid_manifest", id="sequence-bool"),
        pytest.param(lambda: signed(manifest(sequence=2**63)), 400, "invalid_manifest", id="sequence-too-big"),
        pytest.param(lambda: signed(manifest(version="-1.0")), 400, "invalid_manifest", id="version-dash"),
        pytest.param(lambda: signed(manifest(version="1.0/../x")), 400, "invalid_manifest", id="version-slash"),
        pytest.param(lambda: signed(manifest(binaries={})), 400, "invalid_manifest", id="empty-binaries"),
        pytest.param(
            lambda: signed(manifest(binaries={"windows-amd64": {"sha256": "0" * 64, "size": 1}})),
            400,
            "invalid_manifest",
            id="bad-platform",
        ),
        pytest.param(
            lambda: signed(manifest(binaries={"linux-amd64": {"sha256": "A" * 64, "size": 1}})),
            400,
            "invalid_manifest",
            id="bad-sha256",
        ),
        pytest.param(
            lambda: signed(manifest(binaries={"linux-amd64": {"sha256": "0" * 64, "size": -1}})),
            400,
            "invalid_manifest",
            id="negative-size",
        ),
        pytest.param(lambda: signed(manifest(), 1), 400, "threshold_not_met", id="unpinned-key"),
        pytest.param(
            lambda: raw_envelope(manifest_bytes(manifest()), [bare_signature(manifest_bytes(manifest("9.9.9")), 0)]),
            400,
            "threshold_not_met",
            id="signature-over-other-payload",
        ),
        pytest.param(
            lambda: raw_envelope(
                json.dumps(manifest(), indent=1).encode(), [bare_signature(manifest_bytes(manifest()), 0)]
            ),
            400,
            "threshold_not_met",
            id="signature-over-reserialised-payload",
        ),
        pytest.param(
            lambda: raw_envelope(
                manifest_bytes(manifest()),
                [{**bare_signature(manifest_bytes(manifest()), 0), "sig": base64.b64encode(b"short").decode()}],
            ),
            400,
            "threshold_not_met",
            id="truncated-signature",
        ),
        pytest.param(lambda: raw_envelope(manifest_bytes(manifest()), []), 400, "invalid_envelope", id="no-signatures"),
        pytest.param(
            lambda: raw_envelope(manifest_bytes(manifest()), [bare_signature(manifest_bytes(manifest()), 0)] * 17),
            400,
            "too_many_signatures",
            id="17-signatures",
        ),
        pytest.param(lambda: b" " * (1024 * 1024 + 1), 413, "too_large", id="oversize"),
        pytest.param(lambda: signed(b'{"sequence": NaN}'), 400, "invalid_manifest", id="nan"),
        # What the envelope carries is stored and copied into every upgraded node's spec: a field DSSE does not
        # define is refused as any unknown field, and nothing PostgreSQL cannot store passes, wherever it is.
        pytest.param(
            lambda: signed(manifest()).replace(b"{", b'{"extra": 1, ', 1), 400, "invalid_envelope", id="extra"
        ),
        pytest.param(
            lambda: signed(manifest()).replace(b'"keyid": "', b'"keyid": "\\u0000', 1),
            400,
            "invalid_envelope",
            id="nul-keyid",
        ),
        pytest.param(lambda: signed(b'{"sequence": 1e400}'), 400, "invalid_manifest", id="past-a-double"),
    ],
)
def test_bad_envelopes_are_refused_and_write_nothing(api, body, status, code):
    assert_refused(post(api, body()), status, code)


def test_registering_needs_pins(api, settings):
    settings.ROLLOUT = rollout_settings(pins=[])
    assert_refused(post(api, signed(manifest())), 503, "no_release_keys")


@pytest.mark.parametrize(
    ("second", "code"),
    [
        pytest.param(lambda: manifest("0.9.0", 1), "sequence_not_increasing", id="replay-older"),
        pytest.param(lambda: manifest("0.9.0", 1), "sequence_not_increasing", id="lower-sequence"),
        pytest.param(lambda: manifest("2.0.0", 2, notes="other"), "version_exists", id="same-version-new-content"),
    ],
)
def test_the_release_channel_never_goes_back(api, second, code):
    assert post(api, signed(manifest("1.0.0", 1))).status_code == 201
    assert post(api, signed(manifest("2.0.0", 2))).status_code == 201
    response = post(api, signed(second()))
    assert response.status_code == 409, response.content
    assert response.json()["code"] == code
    assert Release.objects.count() == 2


def test_replaying_an_older_registered_manifest_answers_as_the_first_time(api):
    older = signed(manifest("1.0.0", 1))
    assert post(api, older).status_code == 201
    assert post(api, signed(manifest("2.0.0", 2))).status_code == 201
    # Byte-identical manifest: idempotent, not a new registration.
    assert post(api, older).status_code == 200
    assert Release.objects.count() == 2


def test_threshold_two_of_three(api, settings):
    settings.ROLLOUT = rollout_settings(pins=[pin(0), pin(1), pin(2)], threshold=2)
    payload = manifest_bytes(manifest("1.0.0", 1))
    one = raw_envelope(payload, [bare_signature(payload, 0)])
    same_twice = raw_envelope(payload, [bare_signature(payload, 0), bare_signature(payload, 0)])
    for refused in (one, same_twice):
        response = post(api, refused)
        assert response.status_code == 400
        assert response.json()["code"] == "threshold_not_met"
    # Bare signatures carry no public key: these must come from the extension. Use the signer's envelope.
    response = post(api, signed(payload, 0, 2))
    assert response.status_code == 201, response.content
    assert sorted(Release.objects.get().signer_pins) == sorted([pin(0), pin(2)])


@pytest.mark.parametrize("who", ["anonymous_api", "ungranted_api"])
def test_release_methods_need_the_fleet_admin_grant(request, who):
    client = request.getfixturevalue(who)
    expected = {"anonymous_api": (401, "not_authenticated"), "ungranted_api": (403, "permission_denied")}[who]
    for response in (client.get(URL), post(client, signed(manifest()))):
        assert (response.status_code, response.json()["code"]) == expected
    assert not Release.objects.exists()


def test_a_bad_key_is_401(anonymous_api):
    anonymous_api.credentials(HTTP_AUTHORIZATION="Bearer rk_nope")
    response = anonymous_api.get(URL)
    assert (response.status_code, response.json()["code"]) == (401, "authentication_failed")


@pytest.mark.parametrize(
    "release",
    [
        {"pins": [pin(0)], "threshold": "two"},
        {"pins": [pin(0)], "threshold": 0},
        {"pins": [pin(0)], "threshold": 2},
        {"pins": ["sha256/not-a-pin"], "threshold": 1},
    ],
)
def test_misconfigured_keys_refuse_registering_never_weaken_it(api, settings, release):
    settings.ROLLOUT = {**rollout_settings(), "release": release}
    assert_refused(post(api, signed(manifest())), 503, "no_release_keys")
