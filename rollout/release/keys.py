"""Release keys and their pins.

Release keys are Ed25519; ECDSA P-256 keys (signatures with SHA-256, DER
encoded) are accepted too. Every primitive comes from ``cryptography``.

A key's pin is ``sha256/`` + standard base64 (with padding) of SHA-256 over the
DER SubjectPublicKeyInfo of its public key, the same value as::

    openssl pkey -in key.pem -pubout -outform DER | openssl dgst -sha256 -binary | base64
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey

PIN_PREFIX = "sha256/"
SUPPORTED = "Ed25519 or ECDSA P-256"


def generate_private_key() -> ed25519.Ed25519PrivateKey:
    """A new Ed25519 private key."""
    return ed25519.Ed25519PrivateKey.generate()


def private_key_pem(key: PrivateKey) -> bytes:
    """The private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )


def public_key_pem(key: PublicKey) -> bytes:
    """The public key as SubjectPublicKeyInfo PEM."""
    return key.public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )


def spki_der(public_key: PublicKey) -> bytes:
    """The DER SubjectPublicKeyInfo of ``public_key``."""
    return public_key.public_bytes(
        encoding=serialization.Encoding.DER,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )


def pin_of_spki_der(der: bytes) -> str:
    """The pin of a DER SubjectPublicKeyInfo, computed over the bytes as given."""
    return PIN_PREFIX + base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")


def spki_pin(public_key: PublicKey) -> str:
    """``sha256/<base64 of SHA-256(DER SubjectPublicKeyInfo)>``."""
    return pin_of_spki_der(spki_der(public_key))


def parse_pin(pin: str) -> bytes:
    """The 32-byte digest of a pin; ValueError unless it is ``sha256/<base64 of 32 bytes>``.

    Only the canonical form is accepted (standard alphabet, padding, no
    whitespace, as ``base64`` prints it), so that two spellings of one pin
    cannot exist: pins are compared as strings.
    """
    if not isinstance(pin, str):
        raise ValueError(f"a pin must be a string, not the {type(pin).__name__} {pin!r}")
    if not pin.startswith(PIN_PREFIX):
        raise ValueError(f"pin {pin!r} does not start with {PIN_PREFIX!r}; expected sha256/<base64 of 32 bytes>")
    encoded = pin[len(PIN_PREFIX) :]
    try:
        digest = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"pin {pin!r} is not sha256/ followed by standard base64") from None
    if len(digest) != 32:
        raise ValueError(f"pin {pin!r} holds {len(digest)} bytes; a SHA-256 pin holds exactly 32")
    if base64.b64encode(digest).decode("ascii") != encoded:
        raise ValueError(f"pin {pin!r} is not in canonical standard base64 (with padding)")
    return digest


def _check_private(key: object) -> PrivateKey:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise ValueError(f"unsupported key type {type(key).__name__}: release keys are {SUPPORTED}")


def _check_public(key: object) -> PublicKey:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise ValueError(f"unsupported key type {type(key).__name__}: release keys are {SUPPORTED}")


def _is_pem(data: bytes) -> bool:
    return data.lstrip().startswith(b"-----BEGIN ")


def load_private_key(data: bytes) -> PrivateKey:
    """A private key from PEM or DER (PKCS#8, or the traditional EC format). Unencrypted only."""
    try:
        if _is_pem(data):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except TypeError:
        # cryptography raises TypeError when the key is encrypted and no password was given.
        raise ValueError("the private key is encrypted; release keys are read as unencrypted PKCS#8") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"not a private key in PEM or DER form ({SUPPORTED})") from None
    return _check_private(key)


def load_public_key(data: bytes) -> PublicKey:
    """A public key from a public key (PEM or DER SubjectPublicKeyInfo) or from a private key."""
    if _is_pem(data):
        if b"PRIVATE KEY-----" in data:
            return load_private_key(data).public_key()
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            raise ValueError(f"not a public or private key in PEM form ({SUPPORTED})") from None
        return _check_public(key)
    try:
        key = serialization.load_der_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        pass
    else:
        return _check_public(key)
    try:
        return load_private_key(data).public_key()
    except ValueError as exc:
        if "encrypted" in str(exc) or "unsupported key type" in str(exc):
            raise
        raise ValueError(f"not a public or private key in PEM or DER form ({SUPPORTED})") from None


def load_public_key_der(der: bytes) -> PublicKey:
    """A public key from DER SubjectPublicKeyInfo only."""
    try:
        key = serialization.load_der_public_key(der)
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError("not a DER SubjectPublicKeyInfo") from None
    return _check_public(key)


def sign(private_key: PrivateKey, data: bytes) -> bytes:
    """A signature over ``data``: Ed25519, or ECDSA P-256 with SHA-256 (DER)."""
    key = _check_private(private_key)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def verify_signature(public_key: PublicKey, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is a valid signature of ``data`` by ``public_key``."""
    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, data)
        else:
            public_key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True
