"""verify_envelope, the signatures (docs/signing.md#verification-and-the-threshold): which count, against which
pins and keys, k of n. No database.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.release import dsse, keys
from rollout.release.dsse import verify_envelope
from rollout.release.errors import ReleaseError
from tests.release.conftest import (
    THRESHOLD_NOT_MET,
    Build,
    assert_refused,
    b64,
    envelope,
    good_envelope,
    manifest_bytes,
    manifest_dict,
    pin_of,
    raw,
    set_at,
    signature_object,
    with_envelope,
)


def _truncated_sig(env: dict[str, Any], ks: SimpleNamespace) -> None:
    sig = base64.b64decode(env["signatures"][0]["sig"])
    env["signatures"][0]["sig"] = b64(sig[:-1])


def _other_payload_sig(env: dict[str, Any], ks: SimpleNamespace) -> None:
    other = manifest_bytes(sequence=8)
    env["signatures"] = [signature_object(ks.a, other)]


def _reserialised_sig(env: dict[str, Any], ks: SimpleNamespace) -> None:
    # Signed over the same manifest with different whitespace: the signature is over other bytes.
    pretty = json.dumps(manifest_dict(), indent=2).encode()
    env["signatures"] = [signature_object(ks.a, pretty)]


def _unpinned_sig(env: dict[str, Any], ks: SimpleNamespace) -> None:
    env["signatures"] = [signature_object(ks.outsider, manifest_bytes())]


def _outsider_claims_pinned_keyid(env: dict[str, Any], ks: SimpleNamespace) -> None:
    forged = signature_object(ks.outsider, manifest_bytes())
    forged["keyid"] = pin_of(ks.a)
    env["signatures"] = [forged]


def _outsider_carries_pinned_key(env: dict[str, Any], ks: SimpleNamespace) -> None:
    # The outsider's signature travels with the pinned key's public key: the key matches the pin, the signature not.
    forged = signature_object(ks.outsider, manifest_bytes())
    forged["extension"] = dsse.key_extension(ks.a.public_key())
    forged["keyid"] = pin_of(ks.a)
    env["signatures"] = [forged]


def _bad_manifest_unsigned(ks: SimpleNamespace) -> bytes:
    # Both the manifest and the signature are bad: signatures are checked first.
    return raw(envelope(b'{"product": "other", "nope": NaN}', [ks.outsider]))


CASES: dict[str, tuple[Build, str]] = {
    "signature by an unpinned key": (with_envelope(_unpinned_sig), THRESHOLD_NOT_MET),
    "unpinned key claiming a pinned keyid": (with_envelope(_outsider_claims_pinned_keyid), THRESHOLD_NOT_MET),
    "unpinned signature carrying the pinned public key": (
        with_envelope(_outsider_carries_pinned_key),
        THRESHOLD_NOT_MET,
    ),
    "valid signature over a different payload": (with_envelope(_other_payload_sig), THRESHOLD_NOT_MET),
    "signature over the payload re-serialised": (with_envelope(_reserialised_sig), THRESHOLD_NOT_MET),
    "truncated signature": (with_envelope(_truncated_sig), THRESHOLD_NOT_MET),
    "empty signature": (with_envelope(set_at("signatures.0.sig", "")), THRESHOLD_NOT_MET),
    "signatures are checked before the manifest": (_bad_manifest_unsigned, THRESHOLD_NOT_MET),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused(name: str, ks: SimpleNamespace) -> None:
    assert_refused(*CASES[name], ks)


def test_signature_without_keyid_is_tried_against_every_pinned_key(ks: SimpleNamespace) -> None:
    env = envelope(manifest_bytes(), [ks.b])
    del env["signatures"][0]["keyid"]
    verified = verify_envelope(raw(env), pins=[pin_of(ks.a), pin_of(ks.b)], threshold=1)
    assert verified.signer_pins == (pin_of(ks.b),)


def test_out_of_band_public_keys(ks: SimpleNamespace) -> None:
    """An envelope without key extensions verifies when the public keys are given; unpinned ones are ignored."""
    env = envelope(manifest_bytes(), [ks.a, ks.b])
    for signature in env["signatures"]:
        del signature["extension"]
    pins = [pin_of(ks.a), pin_of(ks.b)]
    with pytest.raises(ReleaseError) as info:
        verify_envelope(raw(env), pins=pins, threshold=1)
    assert info.value.code == THRESHOLD_NOT_MET
    assert "No signature carries a public key" in info.value.detail
    verified = verify_envelope(
        raw(env),
        pins=pins,
        threshold=2,
        public_keys=[ks.a.public_key(), keys.public_key_pem(ks.b.public_key()), ks.outsider.public_key()],
    )
    assert set(verified.signer_pins) == set(pins)
    with pytest.raises(ReleaseError) as info:
        verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1, public_keys=[ks.outsider.public_key()])
    assert info.value.code == THRESHOLD_NOT_MET


def test_keyid_naming_a_pin_is_tried_against_that_key_only(ks: SimpleNamespace) -> None:
    env = envelope(manifest_bytes(), [ks.a])
    del env["signatures"][0]["extension"]
    env["signatures"][0]["keyid"] = pin_of(ks.b)
    with pytest.raises(ReleaseError) as info:
        verify_envelope(
            raw(env), pins=[pin_of(ks.a), pin_of(ks.b)], threshold=1, public_keys=[ks.a.public_key(), ks.b.public_key()]
        )
    assert info.value.code == THRESHOLD_NOT_MET


def test_ecdsa_p256_signer(ks: SimpleNamespace, key_p256) -> None:
    env = envelope(manifest_bytes(), [key_p256, ks.a])
    verified = verify_envelope(raw(env), pins=[pin_of(key_p256), pin_of(ks.a)], threshold=2)
    assert verified.signer_pins == (pin_of(key_p256), pin_of(ks.a))


class TestThresholdTwoOfThree:
    @pytest.fixture
    def pins(self, ks: SimpleNamespace) -> list[str]:
        return [pin_of(ks.a), pin_of(ks.b), pin_of(ks.c)]

    def test_one_signature_refused(self, ks: SimpleNamespace, pins: list[str]) -> None:
        with pytest.raises(ReleaseError) as info:
            verify_envelope(raw(envelope(manifest_bytes(), [ks.b])), pins=pins, threshold=2)
        assert info.value.code == THRESHOLD_NOT_MET
        assert "1 of the 2" in info.value.detail

    def test_two_distinct_accepted(self, ks: SimpleNamespace, pins: list[str]) -> None:
        verified = verify_envelope(raw(envelope(manifest_bytes(), [ks.c, ks.a])), pins=pins, threshold=2)
        assert verified.signer_pins == (pin_of(ks.c), pin_of(ks.a))

    def test_three_of_three_all_recorded(self, ks: SimpleNamespace, pins: list[str]) -> None:
        verified = verify_envelope(raw(envelope(manifest_bytes(), [ks.a, ks.b, ks.c])), pins=pins, threshold=2)
        assert set(verified.signer_pins) == set(pins)

    def test_same_key_twice_refused(self, ks: SimpleNamespace, pins: list[str]) -> None:
        env = envelope(manifest_bytes(), [ks.a])
        env["signatures"] = env["signatures"] * 2
        with pytest.raises(ReleaseError) as info:
            verify_envelope(raw(env), pins=pins, threshold=2)
        assert info.value.code == THRESHOLD_NOT_MET

    def test_same_key_twice_without_keyid_refused(self, ks: SimpleNamespace, pins: list[str]) -> None:
        env = envelope(manifest_bytes(), [ks.a])
        env["signatures"] = [{"sig": env["signatures"][0]["sig"], "extension": env["signatures"][0]["extension"]}] * 2
        with pytest.raises(ReleaseError) as info:
            verify_envelope(raw(env), pins=pins, threshold=2)
        assert info.value.code == THRESHOLD_NOT_MET

    def test_pinned_plus_unpinned_refused(self, ks: SimpleNamespace, pins: list[str]) -> None:
        with pytest.raises(ReleaseError) as info:
            verify_envelope(raw(envelope(manifest_bytes(), [ks.a, ks.outsider])), pins=pins, threshold=2)
        assert info.value.code == THRESHOLD_NOT_MET

    def test_duplicate_pins_count_once(self, ks: SimpleNamespace) -> None:
        with pytest.raises(ReleaseError) as info:
            verify_envelope(raw(envelope(manifest_bytes(), [ks.a])), pins=[pin_of(ks.a)] * 2, threshold=2)
        assert info.value.code == THRESHOLD_NOT_MET


def test_sixteen_signatures_accepted(ks: SimpleNamespace) -> None:
    env = envelope(manifest_bytes(), [ks.a])
    env["signatures"] = [signature_object(ks.outsider, manifest_bytes())] * 15 + env["signatures"]
    assert verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1).signer_pins == (pin_of(ks.a),)


@pytest.mark.parametrize("threshold", [0, -1, True, 1.0])
def test_bad_threshold_is_a_programming_error(ks: SimpleNamespace, threshold: Any) -> None:
    with pytest.raises(ValueError, match="threshold"):
        verify_envelope(raw(good_envelope(ks)), pins=[pin_of(ks.a)], threshold=threshold)


def test_bad_pin_is_a_programming_error(ks: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="pin"):
        verify_envelope(raw(good_envelope(ks)), pins=["sha256/short"], threshold=1)
