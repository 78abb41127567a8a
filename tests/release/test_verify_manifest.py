"""verify_envelope, the manifest of a validly signed envelope (docs/signing.md#the-manifest): its JSON, its fields
and their bounds, the product. No database.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from rollout.release.dsse import verify_envelope
from tests.release.conftest import (
    DROP,
    INVALID_MANIFEST,
    WRONG_PRODUCT,
    Build,
    assert_refused,
    envelope,
    manifest_bytes,
    pin_of,
    raw,
    signed,
    signed_manifest,
    with_binary,
)

HEX_A = "a" * 64
ONE_BINARY = '{"linux-amd64":{"sha256":"' + HEX_A + '","size":1}}'


def manifest_text(*, sequence: str = "1", binaries: str = ONE_BINARY) -> Callable[[SimpleNamespace], bytes]:
    """A signed manifest written verbatim, for what json.dumps cannot produce."""
    return signed(f'{{"product":"bcd","version":"1.0.0","sequence":{sequence},"binaries":{binaries}}}'.encode())


def sequence_raw(text: str) -> Callable[[SimpleNamespace], bytes]:
    return manifest_text(sequence=text)


CASES: dict[str, tuple[Build, str]] = {
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
    assert_refused(*CASES[name], ks)


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
