"""What a node agent checks before it runs a binary (docs/signing.md#what-an-agent-checks).

The agent trusts only the release keys: the pins and threshold of its
installation (root 1), and the roots it verified from there. Not the server,
its database, its storage or a CDN. Before it runs a binary it checks, in this
order, and refuses at the first failure:

1. the roots the server offers, each step from the root it holds
   (``verify_root_step``) → ``bad_root``;
2. the release envelope (``spec.daemon.release``) verifies with the threshold of
   distinct pinned keys of the newest root it verified → ``bad_signature``;
3. the signed manifest's product is ``bcd`` and its version is the one the
   spec names → ``wrong_version``;
4. neither the manifest nor the newest root has expired → ``expired``;
5. its sequence is not lower than the highest the node confirmed →
   ``sequence_rollback``;
6. the downloaded bytes' size and sha256 equal the signed manifest's entry for
   the node's platform (not ``spec.daemon.sha256``) → ``digest_mismatch``.

A refusal is reported on the next session call as
``"refused": {"version", "code", "detail"}``. The simulated agents use this
module; the real bcd implements the same checklist (docs/signing.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.release.dsse import verify_envelope
from rollout.release.errors import INVALID_MANIFEST, WRONG_PRODUCT, ReleaseError
from rollout.release.manifest import Binary, Manifest, format_timestamp, shown
from rollout.release.root import Root, root_from_pins, verify_root_step

BAD_ROOT = "bad_root"
BAD_SIGNATURE = "bad_signature"
WRONG_VERSION = "wrong_version"
EXPIRED = "expired"
SEQUENCE_ROLLBACK = "sequence_rollback"
DIGEST_MISMATCH = "digest_mismatch"
#: Not a check of the release: the agent could not get its bytes (a 4xx answer, or bytes unlike the spec's sha256
#: in 3 attempts). A 5xx or a cut connection is retried, never reported (docs/signing.md#what-an-agent-checks).
DOWNLOAD_FAILED = "download_failed"
#: Every code an agent may report in ``refused.code``, in the order of the checks.
REFUSAL_CODES = (BAD_ROOT, BAD_SIGNATURE, WRONG_VERSION, EXPIRED, SEQUENCE_ROLLBACK, DOWNLOAD_FAILED, DIGEST_MISMATCH)
#: The longest ``refused.detail`` the server accepts.
MAX_DETAIL = 1000


class Refused(Exception):
    """The agent will not run this release: ``code`` is one of REFUSAL_CODES, ``detail`` says why."""

    def __init__(self, code: str, detail: str) -> None:
        if code not in REFUSAL_CODES:
            raise ValueError(f"unknown refusal code {code!r}")
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail[:MAX_DETAIL]

    def report(self, version: str) -> dict[str, str]:
        """The ``refused`` field of the next session call."""
        return {"version": version, "code": self.code, "detail": self.detail}


@dataclass(frozen=True)
class TrustedRelease:
    """A release that passed checks 2 to 5; its binary is checked after the download (``verify_binary``)."""

    manifest: Manifest
    signer_pins: tuple[str, ...]
    root_version: int

    def binary_for(self, platform: str) -> Binary:
        """The signed entry for ``platform``; ``digest_mismatch`` when the release has none (nothing to download)."""
        binary = self.manifest.binaries.get(platform)
        if binary is None:
            raise Refused(
                DIGEST_MISMATCH, f"The signed manifest of {self.manifest.version} has no binary for {platform}."
            )
        return binary

    def verify_binary(self, *, platform: str, size: int, sha256: str) -> None:
        """The downloaded bytes (their size and sha256) are the signed manifest's entry for ``platform``."""
        binary = self.binary_for(platform)
        if size != binary.size or sha256.lower() != binary.sha256:
            raise Refused(
                DIGEST_MISMATCH,
                f"The downloaded {platform} binary has {size} bytes and sha256 {sha256}; "
                f"the signed manifest says {binary.size} bytes and {binary.sha256}.",
            )


def envelope_bytes(release: Any) -> bytes:
    """The envelope as it travels in a spec (a JSON object), as bytes to verify; ``bad_signature`` if none."""
    if not isinstance(release, dict):
        raise Refused(BAD_SIGNATURE, "The daemon section carries no signed release (spec.daemon.release).")
    try:
        return json.dumps(release, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError):
        raise Refused(BAD_SIGNATURE, "The signed release is not a JSON object.") from None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class AgentTrust:
    """The trust one agent holds: the newest root it has verified, from its installation's pins and threshold.

    ``follow`` moves it along the root chain; ``verify_release`` checks a
    release against the newest root. Not thread-safe (one per agent).
    """

    def __init__(self, *, pins: Sequence[str], threshold: int) -> None:
        self._root = root_from_pins(pins, threshold)

    @property
    def root(self) -> Root:
        return self._root

    def follow(self, envelopes: Iterable[Any]) -> Root:
        """Verify root envelopes (JSON objects or bytes, oldest first) each from the root held, keeping each step.

        Each must be exactly the next version: one at or below the version held
        (a server replaying old roots) is a step that does not verify, as is a
        skipped version. Raises ``Refused(bad_root)`` at the first step that does
        not verify (a forged or forked root too); the steps before it are kept.
        """
        for item in envelopes:
            raw = item if isinstance(item, bytes) else json.dumps(item, allow_nan=False).encode("utf-8")
            try:
                verified = verify_root_step(self._root, raw)
            except ReleaseError as exc:
                raise Refused(BAD_ROOT, f"Root {self._root.version + 1} does not verify: {exc.detail}") from None
            self._root = verified.root
        return self._root

    def verify_release(
        self, release: Any, *, version: str, confirmed_sequence: int | None, now: datetime
    ) -> TrustedRelease:
        """Checks 2 to 5 (module docstring) of the signed release that ``spec.daemon`` names as ``version``."""
        root = self._root
        try:
            verified = verify_envelope(envelope_bytes(release), pins=root.pins, threshold=root.threshold)
        except ReleaseError as exc:
            if exc.code in (WRONG_PRODUCT, INVALID_MANIFEST):  # signed, but not a bcd manifest this agent reads
                raise Refused(WRONG_VERSION, exc.detail) from None
            raise Refused(BAD_SIGNATURE, f"Against root {root.version}: {exc.detail}") from None
        manifest = verified.manifest
        if manifest.version != version:
            raise Refused(
                WRONG_VERSION,
                f"The signed manifest is of version {shown(manifest.version)}, not {shown(version)} as the spec says.",
            )
        if manifest.expires is not None and manifest.expired(now):
            raise Refused(EXPIRED, f"bcd {manifest.version} expired at {format_timestamp(manifest.expires)}.")
        if root.expires is not None and root.expired(now):
            raise Refused(EXPIRED, f"Root {root.version} expired at {format_timestamp(root.expires)}.")
        if confirmed_sequence is not None and manifest.sequence < confirmed_sequence:
            raise Refused(
                SEQUENCE_ROLLBACK,
                f"bcd {manifest.version} has sequence {manifest.sequence}, below the confirmed sequence "
                f"{confirmed_sequence}.",
            )
        return TrustedRelease(manifest=manifest, signer_pins=verified.signer_pins, root_version=root.version)
