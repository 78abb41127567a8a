"""The root chain: which release keys count, and how they change (docs/signing.md#rotating-the-release-keys).

Root version 1 is the installation's configured pins and threshold. Each
later root is a DSSE envelope of payloadType ``ROOT_PAYLOAD_TYPE`` around::

    {"type": "root", "version": N, "pins": ["sha256/..."], "threshold": K, "expires": "2031-01-01T00:00:00Z"}

(``expires`` optional). Root N+1 is trusted only when it is signed by the
threshold of root N's pins AND by its own threshold of its own pins (TUF's
rule, TUF specification 5.3.4): the old and the new key holders agreed. The
server (registering a root) and the agents (following the chain) check it
with the same function, :func:`verify_root_step`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.release import keys as keys_module
from rollout.release.dsse import (
    Envelope,
    check_threshold,
    count_signers,
    parse_envelope,
    sign_envelope,
    threshold_detail,
)
from rollout.release.errors import INVALID_ROOT, ROOT_VERSION, THRESHOLD_NOT_MET, ReleaseError
from rollout.release.keys import PrivateKey
from rollout.release.manifest import (
    MAX_INT64,
    StrictJSONError,
    format_timestamp,
    loads_strict,
    parse_timestamp,
    shown,
)

ROOT_PAYLOAD_TYPE = "application/vnd.better-compute.root+json"
ROOT_FIELDS = ("type", "version", "pins", "threshold")
ROOT_OPTIONAL_FIELDS = ("expires",)
#: More pins than a DSSE envelope may carry signatures could never all sign one root.
MAX_ROOT_PINS = 16


@dataclass(frozen=True)
class Root:
    """A trusted root: which pins count, and how many of them must sign a release."""

    version: int
    pins: tuple[str, ...]
    threshold: int
    expires: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and self.expires <= now


@dataclass(frozen=True)
class VerifiedRoot:
    root: Root
    payload: bytes
    payload_sha256: str
    #: The pins that counted: of the previous root, and of this one.
    signed_by_previous: tuple[str, ...]
    signed_by_itself: tuple[str, ...]


def _invalid(detail: str) -> ReleaseError:
    return ReleaseError(INVALID_ROOT, detail)


def root_from_pins(pins: Sequence[str], threshold: int) -> Root:
    """Root version 1: the configured pins (distinct, in order) and threshold. ValueError when they are unusable."""
    distinct = tuple(dict.fromkeys(pins))
    for pin in distinct:
        keys_module.parse_pin(pin)
    check_threshold(threshold)
    if threshold > len(distinct):
        raise ValueError(f"threshold {threshold} is more than the {len(distinct)} distinct pin(s)")
    return Root(version=1, pins=distinct, threshold=threshold)


def parse_root(payload: bytes) -> Root:
    """Parse and validate a root payload strictly. Raises ReleaseError (invalid_root)."""
    try:
        data = loads_strict(payload)
    except StrictJSONError as exc:
        raise _invalid(f"The root {exc}.") from None
    if not isinstance(data, dict):
        raise _invalid("The root must be a JSON object with type, version, pins and threshold.")
    unknown = sorted(set(data) - set(ROOT_FIELDS) - set(ROOT_OPTIONAL_FIELDS))
    if unknown:
        raise _invalid(f"The root has unknown field(s): {', '.join(shown(name) for name in unknown[:5])}.")
    missing = [name for name in ROOT_FIELDS if name not in data]
    if missing:
        raise _invalid(f"The root is missing {', '.join(missing)}.")
    if data["type"] != "root":
        raise _invalid("The root field 'type' must be the string 'root'.")
    version = data["version"]
    if type(version) is not int or not 1 <= version <= MAX_INT64:
        raise _invalid(f"The root field 'version' must be an integer from 1 to {MAX_INT64}.")
    pins = data["pins"]
    if not isinstance(pins, list) or not 1 <= len(pins) <= MAX_ROOT_PINS:
        raise _invalid(f"The root field 'pins' must be an array of 1 to {MAX_ROOT_PINS} pins.")
    for pin in pins:
        try:
            keys_module.parse_pin(pin)
        except ValueError as exc:
            raise _invalid(f"The root field 'pins' holds a malformed pin: {exc}.") from None
    if len(set(pins)) != len(pins):
        raise _invalid("The root field 'pins' lists a pin twice.")
    threshold = data["threshold"]
    if type(threshold) is not int or not 1 <= threshold <= len(pins):
        raise _invalid(f"The root field 'threshold' must be an integer from 1 to the number of pins ({len(pins)}).")
    expires = None
    if "expires" in data:
        try:
            expires = parse_timestamp(data["expires"])
        except ValueError as exc:
            raise _invalid(f"The root field 'expires' {exc}.") from None
    return Root(version=version, pins=tuple(pins), threshold=threshold, expires=expires)


def root_to_bytes(root: Root) -> bytes:
    """A root payload: UTF-8 JSON with sorted keys and no insignificant whitespace."""
    data: dict[str, Any] = {
        "type": "root",
        "version": root.version,
        "pins": list(root.pins),
        "threshold": root.threshold,
    }
    if root.expires is not None:
        data["expires"] = format_timestamp(root.expires)
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_root_envelope(raw: bytes) -> tuple[Envelope, Root]:
    """The envelope and its root, parsed strictly; every malformation is ``invalid_root``."""
    try:
        envelope = parse_envelope(raw)
    except ReleaseError as exc:
        raise _invalid(exc.detail) from None
    if envelope.payload_type != ROOT_PAYLOAD_TYPE:
        raise _invalid(f"The envelope's payloadType is {shown(envelope.payload_type)}; expected {ROOT_PAYLOAD_TYPE!r}.")
    return envelope, parse_root(envelope.payload)


def verify_root_step(current: Root, raw: bytes) -> VerifiedRoot:
    """Verify the root that follows ``current``: TUF's rule.

    In order: the envelope and its root are well formed (``invalid_root``);
    its version is ``current.version + 1`` (``root_version``); the threshold of
    ``current``'s pins signed it, and its own threshold of its own pins signed
    it (``threshold_not_met``, the detail says which). Expiry is not judged
    here: an intermediate root of a chain may have expired (TUF 5.3.10); the
    newest one's expiry is the caller's business.
    """
    envelope, root = parse_root_envelope(raw)
    if root.version != current.version + 1:
        raise ReleaseError(
            ROOT_VERSION,
            f"The root has version {root.version}; the next root must have version {current.version + 1}.",
        )
    by_previous = count_signers(envelope, pins=current.pins)
    if len(by_previous.pins) < current.threshold:
        detail = threshold_detail(envelope, signers=by_previous, pins=current.pins, threshold=current.threshold)
        raise ReleaseError(THRESHOLD_NOT_MET, f"Not signed by the keys of root {current.version}: {detail}")
    by_itself = count_signers(envelope, pins=root.pins)
    if len(by_itself.pins) < root.threshold:
        detail = threshold_detail(envelope, signers=by_itself, pins=root.pins, threshold=root.threshold)
        raise ReleaseError(THRESHOLD_NOT_MET, f"Not signed by its own keys: {detail}")
    return VerifiedRoot(
        root=root,
        payload=envelope.payload,
        payload_sha256=hashlib.sha256(envelope.payload).hexdigest(),
        signed_by_previous=by_previous.pins,
        signed_by_itself=by_itself.pins,
    )


def verify_chain(first: Root, envelopes: Iterable[bytes]) -> Root:
    """The newest root reached from ``first`` through ``envelopes`` (oldest first), each step verified."""
    current = first
    for raw in envelopes:
        current = verify_root_step(current, raw).root
    return current


def sign_root(root: Root, private_keys: Iterable[PrivateKey]) -> dict[str, Any]:
    """A new root envelope around ``root``, signed by every key."""
    return sign_envelope(root_to_bytes(root), private_keys, payload_type=ROOT_PAYLOAD_TYPE)
