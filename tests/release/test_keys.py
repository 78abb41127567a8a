"""Keys, pins, signing helpers and the manifest writer. No database."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from rollout.release import dsse, keys
from rollout.release.errors import ReleaseError
from rollout.release.manifest import Binary, Manifest, manifest_to_bytes, parse_manifest
from tests.release.conftest import manifest_bytes, pin_of


def test_pin_is_sha256_of_der_spki(key_a) -> None:
    der = key_a.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    expected = "sha256/" + base64.b64encode(hashlib.sha256(der).digest()).decode()
    assert keys.spki_pin(key_a.public_key()) == expected
    assert len(expected) == len("sha256/") + 44
    assert keys.parse_pin(expected) == hashlib.sha256(der).digest()


def test_private_key_pem_round_trip(key_a) -> None:
    pem = keys.private_key_pem(key_a)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = keys.load_private_key(pem)
    assert pin_of(loaded) == pin_of(key_a)


@pytest.mark.parametrize("form", ["private pem", "public pem", "private der", "public der"])
def test_load_public_key_from_any_form(key_a, form: str) -> None:
    encodings = {
        "private pem": keys.private_key_pem(key_a),
        "public pem": keys.public_key_pem(key_a.public_key()),
        "private der": key_a.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "public der": keys.spki_der(key_a.public_key()),
    }
    assert keys.spki_pin(keys.load_public_key(encodings[form])) == pin_of(key_a)


def test_p256_keys_are_supported(key_p256) -> None:
    pem = keys.private_key_pem(key_p256)
    assert pin_of(keys.load_private_key(pem)) == pin_of(key_p256)
    signature = keys.sign(key_p256, b"data")
    assert keys.verify_signature(key_p256.public_key(), signature, b"data")
    assert not keys.verify_signature(key_p256.public_key(), signature, b"other")
    assert not keys.verify_signature(key_p256.public_key(), b"\x30\x00", b"data")


def test_unsupported_and_encrypted_keys_are_refused() -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ValueError, match="unsupported key type"):
        keys.load_private_key(rsa_pem)
    with pytest.raises(ValueError, match="unsupported key type"):
        keys.load_public_key(
            rsa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    p384 = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(ValueError, match="unsupported key type"):
        keys.load_private_key(keys.private_key_pem(p384))
    encrypted = keys.generate_private_key().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    with pytest.raises(ValueError, match="encrypted"):
        keys.load_private_key(encrypted)
    with pytest.raises(ValueError, match="not a"):
        keys.load_private_key(b"garbage")
    with pytest.raises(ValueError, match="not a"):
        keys.load_public_key(b"garbage")
    with pytest.raises(ValueError, match="not a"):
        keys.load_public_key(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")


@pytest.mark.parametrize(
    "pin",
    [
        "",
        "sha256/",
        "sha1/" + base64.b64encode(b"\0" * 20).decode(),
        "SHA256/" + base64.b64encode(b"\0" * 32).decode(),
        "sha256/" + base64.b64encode(b"\0" * 31).decode(),
        "sha256/" + base64.b64encode(b"\0" * 33).decode(),
        "sha256/" + base64.b64encode(b"\0" * 32).decode().rstrip("="),  # padding is required
        "sha256/" + base64.urlsafe_b64encode(b"\xff" * 32).decode(),  # URL-safe alphabet
        "sha256/" + base64.b64encode(b"\0" * 32).decode() + "\n",
        " sha256/" + base64.b64encode(b"\0" * 32).decode(),
        "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=",  # non-canonical trailing bits
        "sha256/" + hashlib.sha256(b"x").hexdigest(),
    ],
)
def test_parse_pin_refuses(pin: str) -> None:
    with pytest.raises(ValueError, match="pin"):
        keys.parse_pin(pin)


def test_parse_pin_refuses_non_strings() -> None:
    with pytest.raises(ValueError, match="string"):
        keys.parse_pin(None)  # type: ignore[arg-type]


def test_sign_envelope_and_add_signature(key_a, key_b) -> None:
    payload = manifest_bytes()
    env = dsse.sign_envelope(payload, [key_a])
    assert env["payloadType"] == dsse.PAYLOAD_TYPE
    assert base64.b64decode(env["payload"]) == payload
    assert env["signatures"][0]["keyid"] == pin_of(key_a)
    two = dsse.add_signature(env, key_b)
    assert len(env["signatures"]) == 1  # the input is not changed
    assert two["payload"] == env["payload"]
    assert [s["keyid"] for s in two["signatures"]] == [pin_of(key_a), pin_of(key_b)]
    verified = dsse.verify_envelope(dsse.envelope_to_bytes(two), pins=[pin_of(key_a), pin_of(key_b)], threshold=2)
    assert verified.payload == payload
    with pytest.raises(ValueError, match="already signed"):
        dsse.add_signature(two, key_a)


def test_add_signature_refuses_a_key_that_signed_under_another_keyid(key_a, key_b) -> None:
    env = dsse.sign_envelope(manifest_bytes(), [key_a])
    env["signatures"][0]["keyid"] = ""
    with pytest.raises(ValueError, match="already signed"):
        dsse.add_signature(env, key_a)


def test_add_signature_refusals(key_a, key_b, outsider) -> None:
    env = dsse.sign_envelope(manifest_bytes(), [key_a])
    with pytest.raises(ReleaseError) as info:
        dsse.add_signature({**env, "payloadType": "application/json"}, key_b)
    assert info.value.code == "wrong_payload_type"
    full = {**env, "signatures": env["signatures"] * 16}
    with pytest.raises(ReleaseError) as info:
        dsse.add_signature(full, key_b)
    assert info.value.code == "too_many_signatures"
    with pytest.raises(ReleaseError) as info:
        dsse.add_signature({**env, "payload": "%%%"}, key_b)
    assert info.value.code == "invalid_envelope"


def test_sign_envelope_refusals(key_a) -> None:
    with pytest.raises(ValueError, match="at least one"):
        dsse.sign_envelope(b"{}", [])
    with pytest.raises(ValueError, match="twice"):
        dsse.sign_envelope(b"{}", [key_a, key_a])


def test_manifest_to_bytes_is_sorted_compact_and_parses_back() -> None:
    manifest = Manifest(
        product="bcd",
        version="2.0.0-rc.1+build.5",
        sequence=9,
        protocol_version=None,
        binaries={"linux-arm64": Binary(sha256="b" * 64, size=2), "linux-amd64": Binary(sha256="a" * 64, size=1)},
        notes="ünïcode",
    )
    data = manifest_to_bytes(manifest)
    assert b" " not in data.replace("ünïcode".encode(), b"")
    decoded = json.loads(data)
    assert list(decoded) == sorted(decoded)
    assert "protocolVersion" not in decoded
    assert parse_manifest(data) == manifest
