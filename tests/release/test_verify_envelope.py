"""verify_envelope, the envelope (docs/signing.md#the-envelope-dsse): its JSON, its fields, its size, its
payloadType, how many signatures it may carry; the DSSE encoding. No database.
"""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.release import dsse, keys
from rollout.release.dsse import PAYLOAD_TYPE, verify_envelope
from rollout.release.errors import ReleaseError
from tests.release.conftest import (
    INVALID_ENVELOPE,
    TOO_MANY_SIGNATURES,
    WRONG_PAYLOAD_TYPE,
    Build,
    assert_refused,
    b64,
    envelope,
    good_envelope,
    manifest_bytes,
    pin_of,
    raw,
    set_at,
    signature_object,
    with_envelope,
)


def _seventeen(env: dict[str, Any], ks: SimpleNamespace) -> None:
    env["signatures"] = env["signatures"] * 17


def _duplicate_envelope_key(ks: SimpleNamespace) -> bytes:
    text = raw(good_envelope(ks)).decode()
    return text.replace('"payloadType":', '"payload": "e30=", "payloadType":', 1).encode()


def _oversize(ks: SimpleNamespace) -> bytes:
    env = good_envelope(ks)
    env["signatures"][0]["keyid"] = "x" * dsse.MAX_ENVELOPE_BYTES  # a keyid is any hint, but not past the size limit
    return raw(env)


def _wrong_type_and_too_many(ks: SimpleNamespace) -> bytes:
    env = envelope(manifest_bytes(), [ks.a], payload_type="application/vnd.in-toto+json")
    env["signatures"] *= 17
    return raw(env)


CASES: dict[str, tuple[Build, str]] = {
    "payload not base64": (with_envelope(set_at("payload", "!!!!")), INVALID_ENVELOPE),
    "payload with a newline": (
        with_envelope(lambda env, ks: env.update(payload=env["payload"][:8] + "\n" + env["payload"][8:])),
        INVALID_ENVELOPE,
    ),
    "payload impossible base64 length": (with_envelope(set_at("payload", "abcde")), INVALID_ENVELOPE),
    "payload wrong padding": (with_envelope(set_at("payload", "ab=")), INVALID_ENVELOPE),
    "sig not base64": (with_envelope(set_at("signatures.0.sig", "not base64!")), INVALID_ENVELOPE),
    "sig not a string": (with_envelope(set_at("signatures.0.sig", 12)), INVALID_ENVELOPE),
    "keyid not a string": (with_envelope(set_at("signatures.0.keyid", 12)), INVALID_ENVELOPE),
    "signature not an object": (with_envelope(set_at("signatures", ["abc"])), INVALID_ENVELOPE),
    "signature without sig": (with_envelope(set_at("signatures", [{"keyid": "x"}])), INVALID_ENVELOPE),
    "empty signatures list": (with_envelope(set_at("signatures", [])), INVALID_ENVELOPE),
    "signatures not a list": (with_envelope(set_at("signatures", {})), INVALID_ENVELOPE),
    "payloadType missing": (with_envelope(lambda env, ks: env.pop("payloadType")), INVALID_ENVELOPE),
    "payloadType not a string": (with_envelope(set_at("payloadType", 1)), INVALID_ENVELOPE),
    "payload missing": (with_envelope(lambda env, ks: env.pop("payload")), INVALID_ENVELOPE),
    "payload not a string": (with_envelope(set_at("payload", None)), INVALID_ENVELOPE),
    "malformed key extension": (
        with_envelope(set_at("signatures.0.extension", {"kind": dsse.KEY_EXTENSION_KIND, "ext": {}})),
        INVALID_ENVELOPE,
    ),
    "extension without kind": (with_envelope(set_at("signatures.0.extension", {"ext": {}})), INVALID_ENVELOPE),
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
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused(name: str, ks: SimpleNamespace) -> None:
    assert_refused(*CASES[name], ks)


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


@pytest.mark.parametrize("where", ["envelope", "signature"])
def test_a_field_dsse_does_not_define_is_refused(ks: SimpleNamespace, where: str) -> None:
    """As every API body's unknown field is: a typo is said, never ignored (DSSE tools write none)."""
    env = good_envelope(ks)
    (env if where == "envelope" else env["signatures"][0])["comment"] = "hello"
    with pytest.raises(ReleaseError) as caught:
        verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1)
    assert caught.value.code == "invalid_envelope"
    assert "'comment'" in caught.value.detail


@pytest.mark.parametrize(
    "value",
    ['"a\\u0000b"', '"\\ud800"', "1e400"],
    ids=["a NUL", "a lone surrogate", "a number past a double"],
)
def test_what_postgresql_cannot_store_is_refused_even_in_a_foreign_extension(ks: SimpleNamespace, value: str) -> None:
    """The envelope is stored and copied into every upgraded node's spec (jsonb): nothing in it may break that."""
    env = good_envelope(ks)
    env["signatures"][0]["extension"] = {"kind": "application/vnd.example.other;version=1", "ext": {"x": "X"}}
    body = raw(env).replace(b'"X"', value.encode())
    with pytest.raises(ReleaseError) as caught:
        verify_envelope(body, pins=[pin_of(ks.a)], threshold=1)
    assert caught.value.code == "invalid_envelope"


def test_foreign_extensions_are_ignored(ks: SimpleNamespace) -> None:
    # An extension of another kind is someone else's: not signed, so it cannot matter.
    env = good_envelope(ks)
    b_sig = signature_object(ks.b, manifest_bytes())
    b_sig["extension"] = {"kind": "application/vnd.dev.sigstore.verificationmaterial;version=0.1", "ext": {}}
    env["signatures"].append(b_sig)
    verified = verify_envelope(raw(env), pins=[pin_of(ks.a)], threshold=1)
    assert verified.signer_pins == (pin_of(ks.a),)


def test_exactly_one_mebibyte_is_not_refused_for_size(ks: SimpleNamespace) -> None:
    env = good_envelope(ks)
    keyid = env["signatures"][0]["keyid"]
    body = raw(env)
    # The keyid is a hint: one that matches no pin has its signature tried against every pin.
    env["signatures"][0]["keyid"] = keyid + "x" * (dsse.MAX_ENVELOPE_BYTES - len(body))
    body = raw(env)
    assert len(body) == dsse.MAX_ENVELOPE_BYTES
    verify_envelope(body, pins=[pin_of(ks.a)], threshold=1)


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
