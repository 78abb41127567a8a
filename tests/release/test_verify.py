"""verify_envelope against well-formed and adversarial envelopes (CONTRACT 3.2, 3.3). No database."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.release import dsse, keys
from rollout.release.dsse import PAYLOAD_TYPE, verify_envelope
from rollout.release.errors import ReleaseError
from tests.release.conftest import DROP, b64, envelope, manifest_bytes, manifest_dict, pin_of, raw, signature_object

INVALID_ENVELOPE = "invalid_envelope"
INVALID_MANIFEST = "invalid_manifest"
WRONG_PAYLOAD_TYPE = "wrong_payload_type"
WRONG_PRODUCT = "wrong_product"
THRESHOLD_NOT_MET = "threshold_not_met"
TOO_MANY_SIGNATURES = "too_many_signatures"


@pytest.fixture
def ks(key_a, key_b, key_c, outsider) -> SimpleNamespace:
    return SimpleNamespace(a=key_a, b=key_b, c=key_c, outsider=outsider)


def signed(payload: bytes) -> Callable[[SimpleNamespace], bytes]:
    """A builder: ``payload`` correctly signed by the pinned key ``a``."""
    return lambda ks: raw(envelope(payload, [ks.a]))


def signed_manifest(**overrides: Any) -> Callable[[SimpleNamespace], bytes]:
    return signed(manifest_bytes(**overrides))


def with_binary(platform: str, **fields: Any) -> Callable[[SimpleNamespace], bytes]:
    """A signed manifest with one binary entry: ``{"sha256": "a" * 64, "size": 1}`` updated by ``fields``."""
    return signed_manifest(binaries={platform: {"sha256": "a" * 64, "size": 1, **fields}})


def good_envelope(ks: SimpleNamespace) -> dict[str, Any]:
    return envelope(manifest_bytes(), [ks.a])


def with_envelope(change: Callable[[dict[str, Any], SimpleNamespace], None]) -> Callable[[SimpleNamespace], bytes]:
    def build(ks: SimpleNamespace) -> bytes:
        env = good_envelope(ks)
        change(env, ks)
        return raw(env)

    return build


def _set(path: str, value: Any) -> Callable[[dict[str, Any], SimpleNamespace], None]:
    def change(env: dict[str, Any], ks: SimpleNamespace) -> None:
        target = env
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value

    return change


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


def _seventeen(env: dict[str, Any], ks: SimpleNamespace) -> None:
    env["signatures"] = env["signatures"] * 17


def _duplicate_envelope_key(ks: SimpleNamespace) -> bytes:
    text = raw(good_envelope(ks)).decode()
    return text.replace('"payloadType":', '"payload": "e30=", "payloadType":', 1).encode()


def _oversize(ks: SimpleNamespace) -> bytes:
    env = good_envelope(ks)
    env["padding"] = "x" * dsse.MAX_ENVELOPE_BYTES  # unknown fields are ignored, but not past the size limit
    return raw(env)


def _wrong_type_and_too_many(ks: SimpleNamespace) -> bytes:
    env = envelope(manifest_bytes(), [ks.a], payload_type="application/vnd.in-toto+json")
    env["signatures"] *= 17
    return raw(env)


def _bad_manifest_unsigned(ks: SimpleNamespace) -> bytes:
    # Both the manifest and the signature are bad: signatures are checked first.
    return raw(envelope(b'{"product": "other", "nope": NaN}', [ks.outsider]))


HEX_A = "a" * 64
ONE_BINARY = '{"linux-amd64":{"sha256":"' + HEX_A + '","size":1}}'


def manifest_text(*, sequence: str = "1", binaries: str = ONE_BINARY) -> Callable[[SimpleNamespace], bytes]:
    """A signed manifest written verbatim, for what json.dumps cannot produce."""
    return signed(f'{{"product":"bcd","version":"1.0.0","sequence":{sequence},"binaries":{binaries}}}'.encode())


def sequence_raw(text: str) -> Callable[[SimpleNamespace], bytes]:
    return manifest_text(sequence=text)


CASES: dict[str, tuple[Callable[[SimpleNamespace], bytes], str]] = {
    # --- the envelope ---
    "payload not base64": (with_envelope(_set("payload", "!!!!")), INVALID_ENVELOPE),
    "payload with a newline": (
        with_envelope(lambda env, ks: env.update(payload=env["payload"][:8] + "\n" + env["payload"][8:])),
        INVALID_ENVELOPE,
    ),
    "payload impossible base64 length": (with_envelope(_set("payload", "abcde")), INVALID_ENVELOPE),
    "payload wrong padding": (with_envelope(_set("payload", "ab=")), INVALID_ENVELOPE),
    "sig not base64": (with_envelope(_set("signatures.0.sig", "not base64!")), INVALID_ENVELOPE),
    "sig not a string": (with_envelope(_set("signatures.0.sig", 12)), INVALID_ENVELOPE),
    "keyid not a string": (with_envelope(_set("signatures.0.keyid", 12)), INVALID_ENVELOPE),
    "signature not an object": (with_envelope(_set("signatures", ["abc"])), INVALID_ENVELOPE),
    "signature without sig": (with_envelope(_set("signatures", [{"keyid": "x"}])), INVALID_ENVELOPE),
    "empty signatures list": (with_envelope(_set("signatures", [])), INVALID_ENVELOPE),
    "signatures not a list": (with_envelope(_set("signatures", {})), INVALID_ENVELOPE),
    "payloadType missing": (with_envelope(lambda env, ks: env.pop("payloadType")), INVALID_ENVELOPE),
    "payloadType not a string": (with_envelope(_set("payloadType", 1)), INVALID_ENVELOPE),
    "payload missing": (with_envelope(lambda env, ks: env.pop("payload")), INVALID_ENVELOPE),
    "payload not a string": (with_envelope(_set("payload", None)), INVALID_ENVELOPE),
    "malformed key extension": (
        with_envelope(_set("signatures.0.extension", {"kind": dsse.KEY_EXTENSION_KIND, "ext": {}})),
        INVALID_ENVELOPE,
    ),
    "extension without kind": (with_envelope(_set("signatures.0.extension", {"ext": {}})), INVALID_ENVELOPE),
    "duplicate key in the envelope": (_duplicate_envelope_key, INVALID_ENVELOPE),
    "envelope not an object": (lambda ks: b"[]", INVALID_ENVELOPE),
    "envelope not JSON": (lambda ks: b"{payload: 1}", INVALID_ENVELOPE),
    "envelope empty": (lambda ks: b"", INVALID_ENVELOPE),
    "envelope invalid UTF-8": (lambda ks: b'{"payloadType": "\xff"}', INVALID_ENVELOPE),
    "envelope with a byte-order mark": (lambda ks: b"\xef\xbb\xbf" + raw(good_envelope(ks)), INVALID_ENVELOPE),
    "NaN in the envelope": (lambda ks: raw(good_envelope(ks))[:-1] + b', "x": NaN}', INVALID_ENVELOPE),
    "envelope nested too deeply": (lambda ks: b"[" * 100_000 + b"]" * 100_000, INVALID_ENVELOPE),
    "oversize body": (_oversize, INVALID_ENVELOPE),
    "wrong payloadType": (
        lambda ks: raw(envelope(manifest_bytes(), [ks.a], payload_type="application/vnd.in-toto+json")),
        WRONG_PAYLOAD_TYPE,
    ),
    "payloadType changed after signing": (
        lambda ks: raw(envelope(manifest_bytes(), [ks.a], payload_type="application/json", signed_type=PAYLOAD_TYPE)),
        WRONG_PAYLOAD_TYPE,
    ),
    "wrong payloadType is reported before too many signatures": (_wrong_type_and_too_many, WRONG_PAYLOAD_TYPE),
    "17 signatures": (with_envelope(_seventeen), TOO_MANY_SIGNATURES),
    # --- the signatures ---
    "signature by an unpinned key": (with_envelope(_unpinned_sig), THRESHOLD_NOT_MET),
    "unpinned key claiming a pinned keyid": (with_envelope(_outsider_claims_pinned_keyid), THRESHOLD_NOT_MET),
    "unpinned signature carrying the pinned public key": (
        with_envelope(_outsider_carries_pinned_key),
        THRESHOLD_NOT_MET,
    ),
    "valid signature over a different payload": (with_envelope(_other_payload_sig), THRESHOLD_NOT_MET),
    "signature over the payload re-serialised": (with_envelope(_reserialised_sig), THRESHOLD_NOT_MET),
    "truncated signature": (with_envelope(_truncated_sig), THRESHOLD_NOT_MET),
    "empty signature": (with_envelope(_set("signatures.0.sig", "")), THRESHOLD_NOT_MET),
    "signatures are checked before the manifest": (_bad_manifest_unsigned, THRESHOLD_NOT_MET),
    # --- the manifest (validly signed) ---
    "payload not JSON": (signed(b"not json"), INVALID_MANIFEST),
    "payload empty": (signed(b""), INVALID_MANIFEST),
    "payload invalid UTF-8": (signed(b'{"product": "bcd\xff"}'), INVALID_MANIFEST),
    "payload a JSON array": (signed(b"[]"), INVALID_MANIFEST),
    "payload a JSON string": (signed(b'"bcd"'), INVALID_MANIFEST),
    "duplicate key in the manifest": (
        signed(manifest_bytes()[:-1] + b',"sequence":8}'),
        INVALID_MANIFEST,
    ),
    "duplicate key inside binaries": (
        manifest_text(binaries='{"linux-amd64":{"sha256":"' + HEX_A + '","size":1,"size":2}}'),
        INVALID_MANIFEST,
    ),
    "duplicate platform": (
        manifest_text(binaries=ONE_BINARY[:-1] + "," + ONE_BINARY[1:]),
        INVALID_MANIFEST,
    ),
    "NaN in the manifest": (sequence_raw("NaN"), INVALID_MANIFEST),
    "Infinity in the manifest": (sequence_raw("Infinity"), INVALID_MANIFEST),
    "unknown top-level field": (signed_manifest(signature="x"), INVALID_MANIFEST),
    "unknown field in a binary": (
        with_binary("linux-amd64", url="https://x"),
        INVALID_MANIFEST,
    ),
    "missing product": (signed_manifest(product=DROP), INVALID_MANIFEST),
    "missing version": (signed_manifest(version=DROP), INVALID_MANIFEST),
    "missing sequence": (signed_manifest(sequence=DROP), INVALID_MANIFEST),
    "missing binaries": (signed_manifest(binaries=DROP), INVALID_MANIFEST),
    "binary missing size": (signed_manifest(binaries={"linux-amd64": {"sha256": "a" * 64}}), INVALID_MANIFEST),
    "wrong product": (signed_manifest(product="bce"), WRONG_PRODUCT),
    "wrong product, otherwise different schema": (signed(b'{"product":"other","anything":1}'), WRONG_PRODUCT),
    "product not a string": (signed_manifest(product=1), INVALID_MANIFEST),
    "sequence 0": (signed_manifest(sequence=0), INVALID_MANIFEST),
    "sequence negative": (signed_manifest(sequence=-1), INVALID_MANIFEST),
    "sequence float": (sequence_raw("1.0"), INVALID_MANIFEST),
    "sequence exponent": (sequence_raw("1e2"), INVALID_MANIFEST),
    "sequence boolean": (signed_manifest(sequence=True), INVALID_MANIFEST),
    "sequence string": (signed_manifest(sequence="7"), INVALID_MANIFEST),
    "sequence null": (signed_manifest(sequence=None), INVALID_MANIFEST),
    "sequence 2^63": (signed_manifest(sequence=2**63), INVALID_MANIFEST),
    "sequence with 5000 digits": (sequence_raw("9" * 5000), INVALID_MANIFEST),
    "version empty": (signed_manifest(version=""), INVALID_MANIFEST),
    "version starting with a dot": (signed_manifest(version=".1"), INVALID_MANIFEST),
    "version starting with a dash": (signed_manifest(version="-1"), INVALID_MANIFEST),
    "version with a space": (signed_manifest(version="1 0"), INVALID_MANIFEST),
    "version with a slash": (signed_manifest(version="1/../2"), INVALID_MANIFEST),
    "version with a trailing newline": (signed_manifest(version="1.0\n"), INVALID_MANIFEST),
    "version not ASCII": (signed_manifest(version="1.0é"), INVALID_MANIFEST),
    "version of 65 characters": (signed_manifest(version="1" * 65), INVALID_MANIFEST),
    "version a number": (signed_manifest(version=1), INVALID_MANIFEST),
    "empty binaries": (signed_manifest(binaries={}), INVALID_MANIFEST),
    "binaries a list": (signed_manifest(binaries=[]), INVALID_MANIFEST),
    "platform not linux": (
        with_binary("darwin-amd64"),
        INVALID_MANIFEST,
    ),
    "platform without arch": (with_binary("linux-"), INVALID_MANIFEST),
    "platform uppercase": (
        with_binary("linux-AMD64"),
        INVALID_MANIFEST,
    ),
    "platform with a dash in arch": (
        with_binary("linux-arm-v7"),
        INVALID_MANIFEST,
    ),
    "platform arch too long": (
        with_binary("linux-" + "a" * 33),
        INVALID_MANIFEST,
    ),
    "sha256 uppercase": (with_binary("linux-amd64", sha256="A" * 64, size=1), INVALID_MANIFEST),
    "sha256 short": (with_binary("linux-amd64", sha256="a" * 63, size=1), INVALID_MANIFEST),
    "sha256 not hex": (with_binary("linux-amd64", sha256="g" * 64, size=1), INVALID_MANIFEST),
    "binary not an object": (signed_manifest(binaries={"linux-amd64": "a" * 64}), INVALID_MANIFEST),
    "negative size": (with_binary("linux-amd64", sha256="a" * 64, size=-1), INVALID_MANIFEST),
    "size a float": (with_binary("linux-amd64", sha256="a" * 64, size=1.5), INVALID_MANIFEST),
    "size a boolean": (
        with_binary("linux-amd64", sha256="a" * 64, size=False),
        INVALID_MANIFEST,
    ),
    "size 2^63": (with_binary("linux-amd64", sha256="a" * 64, size=2**63), INVALID_MANIFEST),
    "protocolVersion 0": (signed_manifest(protocolVersion=0), INVALID_MANIFEST),
    "protocolVersion a string": (signed_manifest(protocolVersion="3"), INVALID_MANIFEST),
    "protocolVersion null": (signed_manifest(protocolVersion=None), INVALID_MANIFEST),
    "protocolVersion 2^31": (signed_manifest(protocolVersion=2**31), INVALID_MANIFEST),
    "notes not a string": (signed_manifest(notes=5), INVALID_MANIFEST),
    "notes with NUL": (signed_manifest(notes="a\u0000b"), INVALID_MANIFEST),
    "notes with a lone surrogate": (signed(manifest_bytes(notes=DROP)[:-1] + b',"notes":"\\ud800"}'), INVALID_MANIFEST),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused(name: str, ks: SimpleNamespace) -> None:
    build, code = CASES[name]
    with pytest.raises(ReleaseError) as info:
        verify_envelope(build(ks), pins=[pin_of(ks.a)], threshold=1)
    assert info.value.code == code, info.value.detail
    assert info.value.detail
    assert "\n" not in info.value.detail


def test_accepted(ks: SimpleNamespace) -> None:
    payload = manifest_bytes()
    verified = verify_envelope(raw(envelope(payload, [ks.a])), pins=[pin_of(ks.a)], threshold=1)
    assert verified.payload == payload
    assert verified.payload_sha256 == hashlib.sha256(payload).hexdigest()
    assert verified.signer_pins == (pin_of(ks.a),)
    manifest = verified.manifest
    assert (manifest.product, manifest.version, manifest.sequence) == ("bcd", "1.4.0", 7)
    assert manifest.protocol_version == 3
    assert manifest.notes == "optional free text"
    assert manifest.binaries["linux-amd64"].sha256 == "a" * 64
    assert manifest.binaries["linux-arm64"].size == 11876543


def test_largest_values_and_optional_fields_absent(ks: SimpleNamespace) -> None:
    payload = manifest_bytes(
        sequence=2**63 - 1,
        version="a" * 64,
        protocolVersion=DROP,
        notes=DROP,
        binaries={
            "linux-" + "x" * 32: {"sha256": "0" * 64, "size": 2**63 - 1},
            "linux-amd64": {"sha256": "f" * 64, "size": 0},
        },
    )
    manifest = verify_envelope(raw(envelope(payload, [ks.a])), pins=[pin_of(ks.a)], threshold=1).manifest
    assert manifest.sequence == 2**63 - 1
    assert manifest.protocol_version is None
    assert manifest.notes is None
    assert manifest.binaries["linux-amd64"].size == 0


def test_url_safe_base64_without_padding_accepted(ks: SimpleNamespace) -> None:
    # Pick notes whose base64 needs '+' or '/' and padding, so the URL-safe form differs.
    candidates = (manifest_bytes(notes="~?" * i + "\u00ff" * j) for i in range(1, 8) for j in range(3))
    payload = next(p for p in candidates if any(c in b64(p) for c in "+/") and b64(p).endswith("="))
    env = envelope(payload, [ks.a])
    env["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    sig = base64.b64decode(env["signatures"][0]["sig"])
    env["signatures"][0]["sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
    assert "-" in env["payload"] or "_" in env["payload"]
    verified = verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1)
    assert verified.payload == payload


def test_unknown_fields_and_foreign_extensions_are_ignored(ks: SimpleNamespace) -> None:
    # DSSE: "Consumers MUST ignore unrecognized fields." They are not signed, so they cannot matter.
    env = good_envelope(ks)
    env["comment"] = "hello"
    env["signatures"][0]["note"] = {"any": "thing"}
    b_sig = signature_object(ks.b, manifest_bytes())
    b_sig["extension"] = {"kind": "application/vnd.dev.sigstore.verificationmaterial;version=0.1", "ext": {}}
    env["signatures"].append(b_sig)
    verified = verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1)
    assert verified.signer_pins == (pin_of(ks.a),)


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


def test_exactly_one_mebibyte_is_not_refused_for_size(ks: SimpleNamespace) -> None:
    env = good_envelope(ks)
    body = raw(env)
    env["padding"] = "x" * (dsse.MAX_ENVELOPE_BYTES - len(body) - len(', "padding": ""'))
    body = raw(env)
    assert len(body) == dsse.MAX_ENVELOPE_BYTES
    verify_envelope(body, pins=[pin_of(ks.a)], threshold=1)


@pytest.mark.parametrize("threshold", [0, -1, True, 1.0])
def test_bad_threshold_is_a_programming_error(ks: SimpleNamespace, threshold: Any) -> None:
    with pytest.raises(ValueError, match="threshold"):
        verify_envelope(raw(good_envelope(ks)), pins=[pin_of(ks.a)], threshold=threshold)


def test_bad_pin_is_a_programming_error(ks: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="pin"):
        verify_envelope(raw(good_envelope(ks)), pins=["sha256/short"], threshold=1)


def test_pae_matches_the_dsse_test_vector() -> None:
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # LEN is a byte length, not a character count.
    assert dsse.pae("é", b"") == "DSSEv1 2 é 0 ".encode()


def test_parse_envelope(ks: SimpleNamespace) -> None:
    parsed = dsse.parse_envelope(raw(good_envelope(ks)))
    assert parsed.payload_type == PAYLOAD_TYPE
    assert parsed.payload == manifest_bytes()
    assert parsed.signatures[0].keyid == pin_of(ks.a)
    assert parsed.signatures[0].public_key == keys.spki_der(ks.a.public_key())
    env = good_envelope(ks)
    env["signatures"] *= 17
    with pytest.raises(ReleaseError) as info:
        dsse.parse_envelope(raw(env))
    assert info.value.code == TOO_MANY_SIGNATURES
