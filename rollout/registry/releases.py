"""The signed release registry: register and list (binaries' bytes: rollout/registry/binaries.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from fleet.interface import Actor, Tenant, audit_record
from rollout.locks import RELEASE_REGISTRY_LOCK, ROOT_CHAIN_LOCK, advisory_xact_lock
from rollout.models import Release, ReleaseBinary
from rollout.registry.roots import root_first, root_newest, trusted_root
from rollout.release.dsse import verify_envelope
from rollout.release.errors import ReleaseError
from rollout.release.manifest import format_timestamp

if TYPE_CHECKING:
    # django-stubs' placeholder for the AUTH_USER_MODEL (its mypy plugin resolves it).
    from django.contrib.auth.models import _User

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Registration:
    release: Release
    created: bool


def release_list() -> QuerySet[Release]:
    """Every registered release, newest sequence first."""
    return Release.objects.prefetch_related("binaries").order_by("-sequence")


def release_register(
    *,
    envelope: bytes,
    registered_by: _User | None = None,
    actor: Actor | None = None,
    audit_tenant: Tenant | None = None,
) -> Registration:
    """Verify a DSSE envelope against the newest root's keys and record the release.

    The newest root of the chain (rollout/registry/roots.py; root 1 is the configured
    pins and threshold) is the only one that counts: a key rotated out no longer signs.
    The same manifest again (byte-identical payload) changes nothing and
    returns the first registration with ``created=False``. A manifest that has already
    expired is refused (400 ``release_expired``), and so is every release while the newest
    root has expired (409 ``root_expired``). Nothing is written when any check fails.
    Concurrent registrations are serialised by a transaction-scoped advisory lock, so two
    cannot both pass the sequence check, and hold the root chain's lock shared, so the root
    they verify against cannot change before they commit.

    Releases are installation-wide, but the one who registers acts somewhere: a new release is
    recorded (``release.register``) in ``audit_tenant``'s audit trail (the API key's tenant, the
    admin user's tenant), or in the system chain when that is None (a superuser of no tenant).
    """
    root_first()  # root 1 is recorded from the configuration the first time it is needed (503 without keys)
    with transaction.atomic():
        advisory_xact_lock(RELEASE_REGISTRY_LOCK)
        advisory_xact_lock(ROOT_CHAIN_LOCK, shared=True)
        root = trusted_root(root_newest())
        try:
            verified = verify_envelope(envelope, pins=root.pins, threshold=root.threshold)
        except ReleaseError as exc:
            raise InvalidInput(exc.detail, code=exc.code) from exc
        manifest = verified.manifest
        existing = Release.objects.filter(payload_sha256=verified.payload_sha256).first()
        if existing is not None:
            return Registration(release=existing, created=False)
        now = timezone.now()
        if manifest.expires is not None and manifest.expired(now):
            raise InvalidInput(
                f"bcd {manifest.version} expired at {format_timestamp(manifest.expires)}: an expired release is "
                "never registered.",
                code="release_expired",
            )
        if root.expires is not None and root.expired(now):
            raise Conflict(
                f"Root {root.version} expired at {format_timestamp(root.expires)}: register a new root first "
                "(docs/signing.md#rotating-the-release-keys).",
                code="root_expired",
            )
        if Release.objects.filter(version=manifest.version).exists():
            raise Conflict(
                f"Version {manifest.version} is already registered with a different manifest.",
                code="version_exists",
            )
        highest = Release.objects.aggregate(highest=Max("sequence"))["highest"]
        if highest is not None and manifest.sequence <= highest:
            raise Conflict(
                f"Sequence {manifest.sequence} does not move past the highest registered sequence {highest}.",
                code="sequence_not_increasing",
                highestSequence=highest,
            )
        try:
            release = Release.objects.create(
                version=manifest.version,
                sequence=manifest.sequence,
                product=manifest.product,
                protocol_version=manifest.protocol_version,
                notes=manifest.notes or "",
                payload=verified.payload,
                payload_sha256=verified.payload_sha256,
                envelope=envelope.decode("utf-8"),
                signer_pins=list(verified.signer_pins),
                expires_at=manifest.expires,
                registered_at=now,
                registered_by=registered_by,
            )
            ReleaseBinary.objects.bulk_create(
                ReleaseBinary(
                    release=release,
                    platform=platform,
                    arch=platform.removeprefix("linux-"),
                    sha256=binary.sha256,
                    size=binary.size,
                )
                for platform, binary in sorted(manifest.binaries.items())
            )
        except IntegrityError as exc:  # a backstop: the lock makes this unreachable on PostgreSQL
            raise Conflict("A release with this version or sequence already exists.", code="version_exists") from exc
        audit_record(
            tenant=audit_tenant,
            actor=actor,
            action="release.register",
            object_type="release",
            object_id=release.version,
            after={
                "version": release.version,
                "sequence": release.sequence,
                "product": release.product,
                "protocolVersion": release.protocol_version,
                "platforms": sorted(manifest.binaries),
                "expiresAt": format_timestamp(manifest.expires) if manifest.expires else None,
                "rootVersion": root.version,
            },
        )
    log.info(
        "release.registered",
        version=release.version,
        sequence=release.sequence,
        signers=len(release.signer_pins),
        platforms=sorted(manifest.binaries),
    )
    return Registration(release=release, created=True)
