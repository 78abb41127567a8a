"""Release envelopes: DSSE (the Dead Simple Signing Envelope) around a manifest.

An envelope::

    {"payloadType": "application/vnd.better-compute.release+json",
     "payload": "<base64 of the manifest bytes>",
     "signatures": [{"keyid": "sha256/...", "sig": "<base64>",
                     "extension": {"kind": "application/vnd.better-compute.release-key;version=1",
                                   "ext": {"publicKey": "<base64 of the DER SubjectPublicKeyInfo>"}}}]}

Each signature is over ``PAE(payloadType, payload bytes as carried)``.

How a verifier that holds only pins checks signatures: a pin is a hash, and
an Ed25519 public key cannot be recovered from a signature, so the public key
has to travel with the signature. It does so in a DSSE signature extension
(envelope.md, "Signature Extensions") of the kind above. The extension is not
signed and need not be: the verifier hashes the carried DER bytes and uses a
key only when that hash equals a configured pin, exactly as TLS pinning checks
a presented certificate's key. Keys can also be given out of band
(``public_keys=``), which is how envelopes from DSSE tools that add no
extension verify. A field DSSE does not define is refused, as every API body's unknown field is (DSSE tools,
securesystemslib's among them, write none); an extension of another kind is someone else's, and ignored.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollout.release import keys as keys_module
from rollout.release.errors import (
    INVALID_ENVELOPE,
    THRESHOLD_NOT_MET,
    TOO_MANY_SIGNATURES,
    WRONG_PAYLOAD_TYPE,
    ReleaseError,
)
from rollout.release.keys import PrivateKey, PublicKey
from rollout.release.manifest import Manifest, StrictJSONError, loads_strict, parse_manifest, shown

PAYLOAD_TYPE = "application/vnd.better-compute.release+json"
MAX_ENVELOPE_BYTES = 1 << 20
MAX_SIGNATURES = 16
# The DSSE signature extension that carries the signer's public key (DER SubjectPublicKeyInfo, base64).
KEY_EXTENSION_KIND = "application/vnd.better-compute.release-key;version=1"

_BASE64_RE = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes
    # The DER SubjectPublicKeyInfo carried in this signature's key extension, if any. Unauthenticated:
    # it is only used when its hash equals a pin.
    public_key: bytes | None = field(default=None, repr=False)


@dataclass
class Envelope:
    payload_type: str
    payload: bytes
    signatures: list[Signature]


@dataclass(frozen=True)
class VerifiedRelease:
    manifest: Manifest
    payload: bytes
    payload_sha256: str
    signer_pins: tuple[str, ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _invalid(detail: str) -> ReleaseError:
    return ReleaseError(INVALID_ENVELOPE, detail)


def _b64decode(value: Any, what: str) -> bytes:
    """Standard or URL-safe base64, with or without padding; nothing outside the alphabet."""
    if not isinstance(value, str):
        raise _invalid(f"The envelope's {what} must be a base64 string.")
    if not _BASE64_RE.fullmatch(value):
        raise _invalid(f"The envelope's {what} is not base64: it has characters outside the base64 alphabet.")
    normalised = value.translate(_URLSAFE_TO_STANDARD)
    unpadded = normalised.rstrip("=")
    if len(unpadded) % 4 == 1:
        raise _invalid(f"The envelope's {what} is not base64: its length is impossible.")
    padded = unpadded + "=" * (-len(unpadded) % 4)
    if normalised != unpadded and normalised != padded:
        raise _invalid(f"The envelope's {what} is not base64: its padding is wrong.")
    try:
        return base64.b64decode(padded, validate=True)
    except ValueError:  # binascii.Error
        raise _invalid(f"The envelope's {what} is not base64.") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _parse_signature(index: int, item: Any) -> Signature:
    where = f"signatures[{index}]"
    if not isinstance(item, dict):
        raise _invalid(f"The envelope's {where} must be an object with 'sig' and optionally 'keyid'.")
    if "sig" not in item:
        raise _invalid(f"The envelope's {where} has no 'sig'.")
    unknown = sorted(set(item) - {"keyid", "sig", "extension"})
    if unknown:
        raise _invalid(f"The envelope's {where} has fields DSSE does not define: {', '.join(map(repr, unknown[:5]))}.")
    sig = _b64decode(item["sig"], f"{where}.sig")
    keyid = item.get("keyid", "")
    if not isinstance(keyid, str):
        raise _invalid(f"The envelope's {where}.keyid must be a string.")
    public_key = None
    if "extension" in item:
        extension = item["extension"]
        if not isinstance(extension, dict) or not isinstance(extension.get("kind"), str):
            raise _invalid(f"The envelope's {where}.extension must be an object with a string 'kind'.")
        if extension["kind"] == KEY_EXTENSION_KIND:  # other kinds are someone else's: ignored
            ext = extension.get("ext")
            if not isinstance(ext, dict) or "publicKey" not in ext:
                raise _invalid(f"The envelope's {where}.extension.ext must be an object with 'publicKey'.")
            public_key = _b64decode(ext["publicKey"], f"{where}.extension.ext.publicKey")
    return Signature(keyid=keyid, sig=sig, public_key=public_key)


def _parse(raw: bytes) -> Envelope:
    """Parse the envelope's structure; the signature count is checked by the callers."""
    if not isinstance(raw, bytes | bytearray):
        raise TypeError("the envelope must be bytes")
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise _invalid(f"The envelope is {len(raw)} bytes; at most {MAX_ENVELOPE_BYTES} (1 MiB) are accepted.")
    try:
        data = loads_strict(bytes(raw))
    except StrictJSONError as exc:
        raise _invalid(f"The envelope {exc}.") from None
    if not isinstance(data, dict):
        raise _invalid("The envelope must be a JSON object with payloadType, payload and signatures.")
    missing = [name for name in ("payloadType", "payload", "signatures") if name not in data]
    if missing:
        raise _invalid(f"The envelope is missing {', '.join(missing)}.")
    unknown = sorted(set(data) - {"payloadType", "payload", "signatures"})
    if unknown:
        raise _invalid(f"The envelope has fields DSSE does not define: {', '.join(map(repr, unknown[:5]))}.")
    payload_type = data["payloadType"]
    if not isinstance(payload_type, str):
        raise _invalid("The envelope's payloadType must be a string.")
    payload = _b64decode(data["payload"], "payload")
    signatures = data["signatures"]
    if not isinstance(signatures, list):
        raise _invalid("The envelope's signatures must be an array.")
    if not signatures:
        raise _invalid("The envelope has no signatures.")
    return Envelope(
        payload_type=payload_type,
        payload=payload,
        signatures=[_parse_signature(index, item) for index, item in enumerate(signatures)],
    )


def _check_count(envelope: Envelope) -> None:
    if len(envelope.signatures) > MAX_SIGNATURES:
        raise ReleaseError(
            TOO_MANY_SIGNATURES,
            f"The envelope carries {len(envelope.signatures)} signatures; at most {MAX_SIGNATURES} are accepted.",
        )


def parse_envelope(raw: bytes) -> Envelope:
    """Parse an envelope strictly. Raises ReleaseError (invalid_envelope, too_many_signatures).

    Nothing is verified here; see :func:`verify_envelope`.
    """
    envelope = _parse(raw)
    _check_count(envelope)
    return envelope


def _as_public_key(key: PublicKey | bytes) -> PublicKey:
    if isinstance(key, bytes | bytearray):
        return keys_module.load_public_key(bytes(key))
    return key


def _distinct_pins(pins: Sequence[str]) -> list[str]:
    if isinstance(pins, str):
        raise TypeError("pins must be a sequence of pins, not one string")
    distinct: list[str] = []
    for pin in pins:
        keys_module.parse_pin(pin)  # ValueError on a malformed pin: a configuration error, not a refusal
        if pin not in distinct:
            distinct.append(pin)
    return distinct


@dataclass(frozen=True)
class Signers:
    """What ``count_signers`` found: the distinct pinned keys that signed, in order, and whether any
    signature's key (carried or given) was pinned at all."""

    pins: tuple[str, ...]
    any_pinned_key: bool


def count_signers(envelope: Envelope, *, pins: Sequence[str], public_keys: Iterable[PublicKey | bytes] = ()) -> Signers:
    """The distinct pinned keys that made a valid signature over ``PAE(payloadType, payload)``.

    A pinned key's public key is taken from the signatures' key extensions
    (used only when its SHA-256 equals a pin) or from ``public_keys`` (keys,
    or their PEM/DER bytes; those not pinned are ignored). A signature whose
    key extension or keyid names a pin is tried against that key only; any
    other signature is tried against every pinned key not yet counted. A key
    counts once however many times it signs. ValueError for a malformed pin.
    """
    pinned = _distinct_pins(pins)
    known: dict[str, PublicKey] = {}
    for candidate in public_keys:
        public_key = _as_public_key(candidate)
        pin = keys_module.spki_pin(public_key)
        if pin in pinned:
            known.setdefault(pin, public_key)
    carried_pins: list[str | None] = []
    for signature in envelope.signatures:
        carried = None
        if signature.public_key is not None:
            # Hash the carried bytes first: only a key whose DER hashes to a pin is ever parsed.
            carried = keys_module.pin_of_spki_der(signature.public_key)
            if carried in pinned and carried not in known:
                # A pinned key of a type we cannot verify with (ValueError) cannot count.
                with contextlib.suppress(ValueError):
                    known[carried] = keys_module.load_public_key_der(signature.public_key)
        carried_pins.append(carried)

    message = pae(envelope.payload_type, envelope.payload)
    counted: list[str] = []
    for signature, carried in zip(envelope.signatures, carried_pins, strict=True):
        hints = [pin for pin in dict.fromkeys((carried, signature.keyid)) if pin in pinned]
        candidates = hints or list(known)
        for pin in candidates:
            if pin in counted or pin not in known:
                continue
            if keys_module.verify_signature(known[pin], signature.sig, message):
                counted.append(pin)
                break
    return Signers(pins=tuple(counted), any_pinned_key=bool(known))


def threshold_detail(envelope: Envelope, *, signers: Signers, pins: Sequence[str], threshold: int) -> str:
    """The sentence of a ``threshold_not_met`` refusal: how many of how many."""
    detail = (
        f"Valid signatures from {len(signers.pins)} of the {threshold} required distinct pinned keys "
        f"({len(set(pins))} key(s) pinned, {len(envelope.signatures)} signature(s) in the envelope)."
    )
    if not signers.any_pinned_key:
        detail += " No signature carries a public key whose pin is configured."
    return detail


def check_threshold(threshold: int) -> None:
    """ValueError unless ``threshold`` is an integer >= 1 (a configuration error, not a refusal)."""
    if type(threshold) is not int or threshold < 1:
        raise ValueError(f"threshold must be an integer >= 1, not {threshold!r}")


def verify_envelope(
    raw: bytes,
    *,
    pins: Sequence[str],
    threshold: int,
    public_keys: Iterable[PublicKey | bytes] = (),
) -> VerifiedRelease:
    """Verify a release envelope and return its manifest.

    Checks, in order: the size and shape of the envelope; the payloadType;
    the number of signatures; that at least ``threshold`` distinct pinned
    keys made a valid signature over ``PAE(payloadType, payload)``
    (``count_signers``); and only then the manifest.

    Raises ReleaseError with one of the codes in errors.CODES. Raises
    ValueError for a malformed pin or a threshold below 1 (configuration
    errors, which the system checks report at start-up).
    """
    check_threshold(threshold)
    _distinct_pins(pins)

    envelope = _parse(raw)
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ReleaseError(
            WRONG_PAYLOAD_TYPE,
            f"The envelope's payloadType is {shown(envelope.payload_type)}; expected {PAYLOAD_TYPE!r}.",
        )
    _check_count(envelope)
    signers = count_signers(envelope, pins=pins, public_keys=public_keys)
    if len(signers.pins) < threshold:
        raise ReleaseError(
            THRESHOLD_NOT_MET, threshold_detail(envelope, signers=signers, pins=pins, threshold=threshold)
        )

    manifest = parse_manifest(envelope.payload)
    return VerifiedRelease(
        manifest=manifest,
        payload=envelope.payload,
        payload_sha256=hashlib.sha256(envelope.payload).hexdigest(),
        signer_pins=signers.pins,
    )


def key_extension(public_key: PublicKey) -> dict[str, Any]:
    """The DSSE signature extension that carries ``public_key``."""
    return {"kind": KEY_EXTENSION_KIND, "ext": {"publicKey": _b64encode(keys_module.spki_der(public_key))}}


def _signature_object(private_key: PrivateKey, message: bytes) -> dict[str, Any]:
    public_key = private_key.public_key()
    return {
        "keyid": keys_module.spki_pin(public_key),
        "sig": _b64encode(keys_module.sign(private_key, message)),
        "extension": key_extension(public_key),
    }


def sign_envelope(
    payload: bytes, private_keys: Iterable[PrivateKey], *, payload_type: str = PAYLOAD_TYPE
) -> dict[str, Any]:
    """A new envelope (a release's by default) around ``payload``, signed by every key (keyid = the key's pin)."""
    keys = list(private_keys)
    if not keys:
        raise ValueError("at least one private key is needed to sign")
    if len(keys) > MAX_SIGNATURES:
        raise ValueError(f"at most {MAX_SIGNATURES} keys can sign an envelope")
    pins = [keys_module.spki_pin(key.public_key()) for key in keys]
    if len(set(pins)) != len(pins):
        raise ValueError("the same key was given twice; each key signs once")
    message = pae(payload_type, payload)
    return {
        "payloadType": payload_type,
        "payload": _b64encode(payload),
        "signatures": [_signature_object(key, message) for key in keys],
    }


def add_signature(
    envelope: dict[str, Any], private_key: PrivateKey, *, payload_type: str = PAYLOAD_TYPE
) -> dict[str, Any]:
    """A copy of ``envelope`` with one more signature, by ``private_key``.

    The payload is kept exactly as carried. Raises ReleaseError when the
    envelope is malformed, not of ``payload_type`` or already holds
    MAX_SIGNATURES signatures, and ValueError when this key already signed.
    """
    try:
        raw = envelope_to_bytes(envelope)
    except (TypeError, ValueError):
        raise _invalid("The envelope is not JSON-serialisable.") from None
    parsed = parse_envelope(raw)
    if parsed.payload_type != payload_type:
        raise ReleaseError(
            WRONG_PAYLOAD_TYPE,
            f"The envelope's payloadType is {shown(parsed.payload_type)}; expected {payload_type!r}.",
        )
    if len(parsed.signatures) >= MAX_SIGNATURES:
        raise ReleaseError(TOO_MANY_SIGNATURES, f"The envelope already holds {MAX_SIGNATURES} signatures.")
    message = pae(parsed.payload_type, parsed.payload)
    public_key = private_key.public_key()
    pin = keys_module.spki_pin(public_key)
    for signature in parsed.signatures:
        if signature.keyid == pin or keys_module.verify_signature(public_key, signature.sig, message):
            raise ValueError(f"the key {pin} has already signed this envelope")
    return {**envelope, "signatures": [*envelope["signatures"], _signature_object(private_key, message)]}


def envelope_to_bytes(envelope: dict[str, Any]) -> bytes:
    """The envelope as indented UTF-8 JSON with a final newline."""
    return (json.dumps(envelope, indent=2, allow_nan=False) + "\n").encode("utf-8")
