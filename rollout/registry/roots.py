"""The root chain: which release keys count now, and rotating them (docs/signing.md#rotating-the-release-keys).

Root 1 is the configured pins and threshold (ROLLOUT_RELEASE_PINS,
ROLLOUT_RELEASE_THRESHOLD), recorded the first time it is needed; from then on
the configuration changes nothing (a later disagreement is the system check
rollout.W004). Root N+1 is registered only when it verifies against root N by
TUF's rule (rollout.release.root.verify_root_step); releases register against
the newest root only. Two registrations of a next root at once cannot both
become version N+1: they are serialised by an advisory lock, and the unique
version is the backstop.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput, Unavailable
from fleet.interface import Actor, Tenant, audit_record
from rollout import conf
from rollout.locks import ROOT_CHAIN_LOCK, advisory_xact_lock
from rollout.models import ReleaseRoot
from rollout.release.errors import ROOT_VERSION, ReleaseError
from rollout.release.root import Root, parse_root_envelope, root_from_pins, verify_root_step

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

log = structlog.get_logger("rollout")

#: How long a web process answers agents with the root version it read last: the staleness bound of
#: ``rootVersion`` in session answers (docs/signing.md#how-agents-follow-the-chain).
ROOT_VERSION_CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class RootRegistration:
    root: ReleaseRoot
    created: bool


def trusted_root(row: ReleaseRoot) -> Root:
    """The stored root as the verifier's ``Root``."""
    return Root(version=row.version, pins=tuple(row.pins), threshold=row.threshold, expires=row.expires_at)


def configured_root() -> Root:
    """Root 1 as configured now; 503 ``no_release_keys`` when no usable pins are configured."""
    options = conf.options()
    if not options.pins:
        raise Unavailable(
            "No release keys are configured: set ROLLOUT_RELEASE_PINS before registering releases.",
            code="no_release_keys",
        )
    try:
        if options.threshold is None:
            raise ValueError("the threshold is not an integer >= 1")
        return root_from_pins(options.pins, options.threshold)
    except ValueError as exc:
        raise Unavailable(
            "The release keys are misconfigured (see `manage.py check`): registering is refused until fixed.",
            code="no_release_keys",
        ) from exc


def root_first() -> ReleaseRoot:
    """Root 1: the recorded one, else the configuration, recorded now (once, whoever asks at the same time)."""
    recorded = ReleaseRoot.objects.filter(version=1).first()
    if recorded is not None:
        return recorded
    root = configured_root()
    with transaction.atomic():
        advisory_xact_lock(ROOT_CHAIN_LOCK)
        recorded, created = ReleaseRoot.objects.get_or_create(
            version=1,
            defaults={"pins": list(root.pins), "threshold": root.threshold, "recorded_at": timezone.now()},
        )
    if created:
        log.info("release_root.recorded", version=1, pins=list(root.pins), threshold=root.threshold)
    return recorded


def root_newest() -> ReleaseRoot:
    """The newest root of the chain (recording root 1 when the chain is empty)."""
    return ReleaseRoot.objects.order_by("-version").first() or root_first()


def roots_list() -> QuerySet[ReleaseRoot]:
    """The chain, version 1 first (recording root 1 when it is configured and not recorded yet)."""
    with contextlib.suppress(Unavailable):  # no keys configured: an empty chain
        root_first()
    return ReleaseRoot.objects.order_by("version")


def roots_after_queryset(*, version: int) -> QuerySet[ReleaseRoot]:
    """The roots after ``version`` (each with its envelope), oldest first: what an agent holding ``version``
    verifies next."""
    return ReleaseRoot.objects.filter(version__gt=max(version, 1)).order_by("version")


_cached_version: tuple[float, int] | None = None


def root_version_cached() -> int:
    """The newest root's version as this process last read it, at most ROOT_VERSION_CACHE_SECONDS old.

    Read for every session answer: one query per process per period, none per heartbeat. A
    rotation committed in this process is seen at once (``root_version_forget``).
    """
    global _cached_version
    now = time.monotonic()
    cached = _cached_version
    if cached is not None and now - cached[0] < ROOT_VERSION_CACHE_SECONDS:
        return cached[1]
    version = ReleaseRoot.objects.aggregate(newest=Max("version"))["newest"] or 1
    _cached_version = (now, version)
    return version


def root_version_forget() -> None:
    global _cached_version
    _cached_version = None


def _refusal(exc: ReleaseError, *, current: int) -> Exception:
    if exc.code == ROOT_VERSION:
        return Conflict(exc.detail, code=ROOT_VERSION, currentVersion=current)
    return InvalidInput(exc.detail, code=exc.code)


def _shown(root: Root) -> dict[str, Any]:
    expires = root.expires.isoformat().replace("+00:00", "Z") if root.expires else None
    return {"version": root.version, "pins": list(root.pins), "threshold": root.threshold, "expiresAt": expires}


def root_register(*, envelope: bytes, recorded_by: _User | None = None, actor: Actor | None = None) -> RootRegistration:
    """Verify a next root against the newest one and record it (TUF's rule: signed by both key sets).

    400 ``invalid_root`` (malformed, or already expired), 400 ``threshold_not_met``, 409
    ``root_version`` (not the newest + 1: a skipped version or a fork). The same root again (the
    same payload, verifying against its predecessor) answers the recorded one (``created=False``).
    A new root is recorded in every tenant's audit trail and the system chain (``release_root.rotate``):
    it changes what every node of every tenant trusts.
    """
    try:
        parsed_envelope, parsed = parse_root_envelope(envelope)
    except ReleaseError as exc:
        raise InvalidInput(exc.detail, code=exc.code) from exc
    root_first()
    payload_sha256 = hashlib.sha256(parsed_envelope.payload).hexdigest()
    with transaction.atomic():
        advisory_xact_lock(ROOT_CHAIN_LOCK)
        current = ReleaseRoot.objects.order_by("-version").first()
        assert current is not None  # root_first recorded root 1
        same = ReleaseRoot.objects.filter(payload_sha256=payload_sha256).first()
        base = ReleaseRoot.objects.get(version=same.version - 1) if same is not None else current
        try:
            verified = verify_root_step(trusted_root(base), envelope)
        except ReleaseError as exc:
            raise _refusal(exc, current=current.version) from exc
        if same is not None:
            return RootRegistration(root=same, created=False)
        now = timezone.now()
        if verified.root.expired(now):
            raise InvalidInput(f"Root {parsed.version} has already expired.", code="invalid_root")
        try:
            with transaction.atomic():
                row = ReleaseRoot.objects.create(
                    version=verified.root.version,
                    pins=list(verified.root.pins),
                    threshold=verified.root.threshold,
                    expires_at=verified.root.expires,
                    envelope=envelope.decode("utf-8"),
                    payload_sha256=verified.payload_sha256,
                    signer_pins=list(dict.fromkeys(verified.signed_by_previous + verified.signed_by_itself)),
                    recorded_at=now,
                    recorded_by=recorded_by,
                )
        except IntegrityError as exc:  # a backstop: the lock makes this unreachable on PostgreSQL
            raise Conflict(
                "Another root took this version.", code=ROOT_VERSION, currentVersion=current.version
            ) from exc
        before, after = _shown(trusted_root(current)), _shown(verified.root)
        for tenant in [*Tenant.objects.order_by("pk"), None]:
            audit_record(
                tenant=tenant,
                actor=actor,
                action="release_root.rotate",
                object_type="release_root",
                object_id=row.version,
                before=before,
                after=after,
            )
        transaction.on_commit(root_version_forget)
    log.info(
        "release_root.rotated",
        version=row.version,
        pins=row.pins,
        threshold=row.threshold,
        signers=len(row.signer_pins),
    )
    return RootRegistration(root=row, created=True)
