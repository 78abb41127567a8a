"""The signed release registry: register, list, resolve daemon sections (binaries' bytes: services/binaries.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput, Unavailable
from fleet.interface import Actor, Tenant, audit_record
from rollout import conf
from rollout.locks import RELEASE_REGISTRY_LOCK, advisory_xact_lock
from rollout.models import Release, ReleaseBinary
from rollout.release.dsse import verify_envelope
from rollout.release.errors import ReleaseError

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
    """Verify a DSSE envelope against the pinned keys and record the release.

    The same manifest again (byte-identical payload) changes nothing and
    returns the first registration with ``created=False``. Nothing is
    written when any check fails. Concurrent registrations are serialised by
    a transaction-scoped advisory lock, so two cannot both pass the sequence
    check.

    Releases are installation-wide, but the one who registers acts somewhere: a new release is
    recorded (``release.register``) in ``audit_tenant``'s audit trail (the API key's tenant, the
    admin user's tenant), or in the system chain when that is None (a superuser of no tenant).
    """
    options = conf.options()
    if not options.pins:
        raise Unavailable(
            "No release keys are configured: set ROLLOUT_RELEASE_PINS before registering releases.",
            code="no_release_keys",
        )
    misconfigured = Unavailable(
        "The release keys are misconfigured (see `manage.py check`): registering is refused until fixed.",
        code="no_release_keys",
    )
    if options.threshold is None or options.threshold > len(set(options.pins)):
        raise misconfigured
    try:
        verified = verify_envelope(envelope, pins=options.pins, threshold=options.threshold)
    except ReleaseError as exc:
        raise InvalidInput(exc.detail, code=exc.code) from exc
    except ValueError as exc:  # a malformed pin: a configuration error, never the caller's
        raise misconfigured from exc
    manifest = verified.manifest

    with transaction.atomic():
        advisory_xact_lock(RELEASE_REGISTRY_LOCK)
        existing = Release.objects.filter(payload_sha256=verified.payload_sha256).first()
        if existing is not None:
            return Registration(release=existing, created=False)
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
                registered_at=timezone.now(),
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


def daemon_section(*, version: str, arch: str) -> dict[str, Any] | None:
    """``{"version", "url", "sha256"}`` for a registered version and arch, else None."""
    platform = f"linux-{arch}"
    binary = ReleaseBinary.objects.filter(release__version=version, platform=platform).only("sha256").first()
    url = conf.binary_url(version, platform)
    if binary is None or url is None:
        return None
    return {"version": version, "url": url, "sha256": binary.sha256}
