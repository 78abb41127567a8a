"""Keys and envelope builders for the signing library's tests (no database)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from rollout.release import dsse, keys
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
