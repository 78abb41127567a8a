"""Offline signing and verification of bcd release manifests (DSSE envelopes, pinned keys).

No Django here: the package is used by the server and, offline, by
``python -m rollout.release``. See docs/signing.md.
"""

from rollout.release.dsse import (
    KEY_EXTENSION_KIND,
    MAX_ENVELOPE_BYTES,
    MAX_SIGNATURES,
    PAYLOAD_TYPE,
    Envelope,
    Signature,
    VerifiedRelease,
    add_signature,
    envelope_to_bytes,
    pae,
    parse_envelope,
    sign_envelope,
    verify_envelope,
)
from rollout.release.errors import ReleaseError
from rollout.release.keys import (
    generate_private_key,
    load_private_key,
    load_public_key,
    parse_pin,
    private_key_pem,
    spki_pin,
)
from rollout.release.manifest import Binary, Manifest, manifest_to_bytes, parse_manifest

__all__ = [
    "KEY_EXTENSION_KIND",
    "MAX_ENVELOPE_BYTES",
    "MAX_SIGNATURES",
    "PAYLOAD_TYPE",
    "Binary",
    "Envelope",
    "Manifest",
    "ReleaseError",
    "Signature",
    "VerifiedRelease",
    "add_signature",
    "envelope_to_bytes",
    "generate_private_key",
    "load_private_key",
    "load_public_key",
    "manifest_to_bytes",
    "pae",
    "parse_envelope",
    "parse_manifest",
    "parse_pin",
    "private_key_pem",
    "sign_envelope",
    "spki_pin",
    "verify_envelope",
]
