"""Keys and envelope builders for the signing library's tests (no database)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from rollout.release import dsse, keys
from rollout.release.dsse import verify_envelope
from rollout.release.errors import ReleaseError
from rollout.release.keys import PrivateKey
from tests.release.clitools import run


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pin_of(key: PrivateKey) -> str:
    return keys.spki_pin(key.public_key())


DROP = object()  # an override that removes the field


def manifest_dict(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "product": "bcd",
        "version": "1.4.0",
        "sequence": 7,
        "protocolVersion": 3,
        "binaries": {
            "linux-amd64": {"sha256": "a" * 64, "size": 12345678},
            "linux-arm64": {"sha256": "b" * 64, "size": 11876543},
        },
        "notes": "optional free text",
    }
    for name, value in overrides.items():
        if value is DROP:
            data.pop(name, None)
        else:
            data[name] = value
    return data


def manifest_bytes(**overrides: Any) -> bytes:
    return json.dumps(manifest_dict(**overrides), separators=(",", ":")).encode()


def signature_object(key: PrivateKey, payload: bytes, *, payload_type: str = dsse.PAYLOAD_TYPE) -> dict[str, Any]:
    """A signature object (keyid = pin, with the key extension) over PAE(payload_type, payload)."""
    return {
        "keyid": pin_of(key),
        "sig": b64(keys.sign(key, dsse.pae(payload_type, payload))),
        "extension": dsse.key_extension(key.public_key()),
    }


def envelope(
    payload: bytes,
    signers: list[PrivateKey],
    *,
    payload_type: str = dsse.PAYLOAD_TYPE,
    signed_type: str | None = None,
) -> dict[str, Any]:
    """An envelope dict whose signatures are over PAE(signed_type or payload_type, payload)."""
    return {
        "payloadType": payload_type,
        "payload": b64(payload),
        "signatures": [signature_object(key, payload, payload_type=signed_type or payload_type) for key in signers],
    }


def raw(env: dict[str, Any]) -> bytes:
    return json.dumps(env).encode()


@pytest.fixture(scope="session")
def key_a() -> PrivateKey:
    return keys.generate_private_key()


@pytest.fixture(scope="session")
def key_b() -> PrivateKey:
    return keys.generate_private_key()


@pytest.fixture(scope="session")
def key_c() -> PrivateKey:
    return keys.generate_private_key()


@pytest.fixture(scope="session")
def key_p256() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def outsider() -> PrivateKey:
    """A valid key whose pin is never configured."""
    return keys.generate_private_key()


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    """Two keys and two fake binaries, shared by the tests (keygen costs a process each)."""
    path = tmp_path_factory.mktemp("signing")
    for name in ("a", "b"):
        result = run("keygen", "--out", path / f"{name}.pem")
        assert result.returncode == 0, result.stderr
        (path / f"{name}.pin").write_text(result.stdout.strip())
    (path / "bcd-amd64").write_bytes(b"\x7fELF amd64 " * 1000)
    (path / "bcd-arm64").write_bytes(b"\x7fELF arm64 " * 900)
    return path


# --- verify_envelope's tests (test_verify_*.py): the refusal codes, the keys, builders of bodies ---------

# The codes as the API states them (docs/signing.md), written out rather than imported from
# rollout/release/errors.py: renaming one there is a change of the API these tests must catch.
INVALID_ENVELOPE = "invalid_envelope"
INVALID_MANIFEST = "invalid_manifest"
WRONG_PAYLOAD_TYPE = "wrong_payload_type"
WRONG_PRODUCT = "wrong_product"
THRESHOLD_NOT_MET = "threshold_not_met"
TOO_MANY_SIGNATURES = "too_many_signatures"

#: A body to verify, built from the test keys; with the code ``verify_envelope`` must refuse it with.
Build = Callable[[SimpleNamespace], bytes]


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


def set_at(path: str, value: Any) -> Callable[[dict[str, Any], SimpleNamespace], None]:
    """A change for ``with_envelope``: the envelope's field at ``path`` (dotted; list indexes as numbers) := value."""

    def change(env: dict[str, Any], ks: SimpleNamespace) -> None:
        target = env
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value

    return change


def assert_refused(build: Build, code: str, ks: SimpleNamespace) -> None:
    """``verify_envelope`` (pins: key ``a``, threshold 1) refuses the body with ``code`` and a one-line detail."""
    with pytest.raises(ReleaseError) as info:
        verify_envelope(build(ks), pins=[pin_of(ks.a)], threshold=1)
    assert info.value.code == code, info.value.detail
    assert info.value.detail
    assert "\n" not in info.value.detail
