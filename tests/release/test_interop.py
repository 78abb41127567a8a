"""Interoperability: pins agree with openssl; envelopes agree with securesystemslib's DSSE."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from rollout.release import dsse, keys
from rollout.release.errors import ReleaseError
from tests.release.clitools import ok, pin, sign_new
from tests.release.conftest import manifest_bytes, pin_of

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
BASE64 = shutil.which("base64") or "/usr/bin/base64"


def openssl_pin(key_file: Path) -> str:
    """``openssl pkey -in key.pem -pubout -outform DER | openssl dgst -sha256 -binary | base64``."""
    der = subprocess.run(
        [OPENSSL, "pkey", "-in", key_file, "-pubout", "-outform", "DER"], capture_output=True, check=True
    )
    digest = subprocess.run([OPENSSL, "dgst", "-sha256", "-binary"], input=der.stdout, capture_output=True, check=True)
    encoded = subprocess.run([BASE64], input=digest.stdout, capture_output=True, check=True)
    return "sha256/" + encoded.stdout.decode().strip()


def test_cli_pin_equals_the_openssl_one_liner(work: Path) -> None:
    assert pin(work, "a") == openssl_pin(work / "a.pem")
    assert ok("pin", work / "b.pem").stdout.strip() == openssl_pin(work / "b.pem")


def test_p256_pin_equals_openssl(tmp_path: Path) -> None:
    key_file = tmp_path / "p256.pem"
    subprocess.run(
        [OPENSSL, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key_file], check=True
    )
    assert ok("pin", key_file).stdout.strip() == openssl_pin(key_file)


def sslib_signer(private_key: keys.PrivateKey) -> CryptoSigner:
    """A securesystemslib signer whose keyid is the key's pin (as our envelopes use)."""
    public = SSlibKey.from_crypto(private_key.public_key(), keyid=pin_of(private_key))
    return CryptoSigner(private_key, public)


@pytest.mark.parametrize("key_name", ["key_a", "key_p256"])
def test_securesystemslib_envelope_verifies(request, key_name: str, key_b) -> None:
    private_key = request.getfixturevalue(key_name)
    payload = manifest_bytes()
    envelope = Envelope(payload=payload, payload_type=dsse.PAYLOAD_TYPE, signatures={})
    envelope.sign(sslib_signer(private_key))
    envelope.sign(sslib_signer(key_b))
    raw = json.dumps(envelope.to_dict()).encode()
    pins = [pin_of(private_key), pin_of(key_b)]

    # Plain DSSE carries no public key: the pins alone cannot check it ...
    with pytest.raises(ReleaseError) as info:
        dsse.verify_envelope(raw, pins=pins, threshold=1)
    assert info.value.code == "threshold_not_met"
    # ... the public keys given out of band can,
    verified = dsse.verify_envelope(
        raw, pins=pins, threshold=2, public_keys=[private_key.public_key(), key_b.public_key()]
    )
    assert verified.payload == payload
    assert set(verified.signer_pins) == set(pins)

    # ... and so can the pins alone once the signer attaches the key extension (an unrecognised field to sslib).
    with_keys = Envelope(payload=payload, payload_type=dsse.PAYLOAD_TYPE, signatures={})
    for signer_key in (private_key, key_b):
        signature = with_keys.sign(sslib_signer(signer_key))
        signature.unrecognized_fields["extension"] = dsse.key_extension(signer_key.public_key())
    raw = json.dumps(with_keys.to_dict()).encode()
    assert set(dsse.verify_envelope(raw, pins=pins, threshold=2).signer_pins) == set(pins)


def test_our_envelope_verifies_with_securesystemslib(key_a, key_b, key_p256) -> None:
    env = dsse.sign_envelope(manifest_bytes(), [key_a, key_p256])
    env = dsse.add_signature(env, key_b)
    parsed = Envelope.from_dict(json.loads(dsse.envelope_to_bytes(env)))
    assert parsed.payload == manifest_bytes()
    assert parsed.payload_type == dsse.PAYLOAD_TYPE
    sslib_keys = [SSlibKey.from_crypto(k.public_key(), keyid=pin_of(k)) for k in (key_a, key_b, key_p256)]
    accepted = parsed.verify(sslib_keys, 3)
    assert set(accepted) == {pin_of(key_a), pin_of(key_b), pin_of(key_p256)}


def test_cli_envelope_verifies_with_securesystemslib(work: Path, tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    assert sign_new(work, release).returncode == 0
    ok("sign", "--key", work / "b.pem", "--envelope", release)
    parsed = Envelope.from_dict(json.loads(release.read_text()))
    sslib_keys = [
        SSlibKey.from_crypto(keys.load_public_key((work / f"{name}.pem").read_bytes()), keyid=pin(work, name))
        for name in ("a", "b")
    ]
    assert set(parsed.verify(sslib_keys, 2)) == {pin(work, "a"), pin(work, "b")}
    # The extension survives securesystemslib's round trip, so the pins alone still verify it afterwards.
    again = json.dumps(parsed.to_dict()).encode()
    assert dsse.verify_envelope(again, pins=[pin(work, "a"), pin(work, "b")], threshold=2)


def test_tampered_envelope_fails_with_securesystemslib_too(key_a) -> None:
    from securesystemslib.exceptions import VerificationError

    env = dsse.sign_envelope(manifest_bytes(), [key_a])
    env["payloadType"] = "application/vnd.in-toto+json"
    parsed = Envelope.from_dict(env)
    with pytest.raises(VerificationError):
        parsed.verify([SSlibKey.from_crypto(key_a.public_key(), keyid=pin_of(key_a))], 1)


def test_signature_class_round_trips_extension(key_a) -> None:
    """securesystemslib keeps unknown signature fields: the key extension is not lost by its tools."""
    sig = Signature.from_dict({"keyid": "k", "sig": "00", "extension": dsse.key_extension(key_a.public_key())})
    assert sig.to_dict()["extension"]["kind"] == dsse.KEY_EXTENSION_KIND


def test_p256_key_generated_by_cryptography_signs_via_our_library(key_p256) -> None:
    assert isinstance(key_p256, ec.EllipticCurvePrivateKey)
    env = dsse.sign_envelope(manifest_bytes(), [key_p256])
    assert dsse.verify_envelope(dsse.envelope_to_bytes(env), pins=[pin_of(key_p256)], threshold=1)
