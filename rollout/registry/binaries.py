"""A release's binaries: storing their bytes (``release upload``) and finding them for a download.

How the bytes are kept and reach an agent is rollout/registry/storage.py (docs/operations.md#binary-delivery);
here are the rules: bytes are stored only when they are the signed manifest's, and a download is
served only for a registered binary whose bytes were uploaded and are still there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

import structlog
from django.utils import timezone

from core.errors import NotFound
from core.statements import prepared_cursor
from rollout.models import Release, ReleaseBinary, binary_storage_name
from rollout.registry import storage

log = structlog.get_logger(__name__)


def release_binary_get(*, version: str, platform: str) -> ReleaseBinary:
    binary = ReleaseBinary.objects.select_related("release").filter(release__version=version, platform=platform).first()
    if binary is None:
        raise NotFound(_no_binary(version, platform), code="unknown_binary")
    return binary


def release_binary_store(*, version: str, platform: str, source: IO[bytes]) -> ReleaseBinary:
    """Store a binary's bytes, refusing any whose sha256 or size differ from the signed manifest.

    One pass over ``source``, a chunk at a time: it is hashed while it is written to a temporary
    name in the same store, which becomes the binary's only once both matched (an atomic rename,
    or a server-side copy in object storage). A download never sees a missing or half-written
    file: it reads the old bytes or the new ones (the same bytes, as both match the manifest). A
    refused upload (InvalidInput ``size_mismatch`` or ``sha256_mismatch``) removes its temporary
    copy and leaves the stored bytes as they were; an interrupted one leaves at most a temporary
    copy, never served (``.<platform>.*.part``).
    """
    binary = release_binary_get(version=version, platform=platform)
    storage.store_checked(
        binary.storage_name, source, version=version, platform=platform, size=binary.size, sha256=binary.sha256
    )
    ReleaseBinary.objects.filter(pk=binary.pk).update(stored_at=timezone.now())
    binary.refresh_from_db()
    log.info("release.binary_stored", version=version, platform=platform, size=binary.size)
    return binary


@dataclass(frozen=True)
class ServedBinary:
    """What a download serves: a registered binary whose bytes were uploaded."""

    version: str
    platform: str
    sha256: str
    size: int

    @property
    def storage_name(self) -> str:
        return binary_storage_name(self.version, self.platform)


# Every node downloads once per upgrade: one statement, not the ORM's query compilation (which costs the web tier
# more CPU than the statement costs PostgreSQL).
_SERVED_SQL = f"""
SELECT b.sha256, b.size, b.stored_at FROM {ReleaseBinary._meta.db_table} AS b
JOIN {Release._meta.db_table} AS r ON r.id = b.release_id
WHERE r.version = %s AND b.platform = %s
"""  # noqa: S608 - table names from the models, values bound


def release_binary_served(*, version: str, platform: str) -> ServedBinary:
    """The binary a download serves; NotFound (``not_found``) when unknown, not uploaded or missing from the store."""
    with prepared_cursor() as cursor:
        cursor.execute(_SERVED_SQL, [version, platform])
        row = cursor.fetchone()
    if row is None:
        raise NotFound(_no_binary(version, platform), code="not_found")
    sha256, size, stored_at = row
    if stored_at is None:
        raise NotFound(f"bcd {version} for {platform} is registered but its bytes were not uploaded.", code="not_found")
    binary = ServedBinary(version=version, platform=platform, sha256=sha256, size=size)
    if not storage.stored(binary.storage_name):
        raise _missing(version, platform)
    return binary


# A stored binary's facts never change: a release is never deleted, and its bytes are only ever its signed
# manifest's. So a process keeps each binary it served with nginx moving the bytes (``accel``), beside its file's
# identity, and the async front answers later downloads of it without a statement (rollout/api/download_answers.py).
# The file's stat is checked each time: bytes stored again, or gone, are Django's again.
_served_files: dict[tuple[str, str], tuple[ServedBinary, tuple[int, int, int]]] = {}


def release_binary_served_keep(*, binary: ServedBinary) -> None:
    """Keep a binary a download just served (``accel`` mode), for ``release_binary_served_kept``."""
    identity = storage.stored_file_identity(binary.storage_name)
    if identity is not None:
        _served_files[(binary.version, binary.platform)] = (binary, identity)


def release_binaries_kept() -> bool:
    """Whether this process keeps any served binary (none before its first download through the view)."""
    return bool(_served_files)


def release_binary_served_kept(*, version: str, platform: str) -> ServedBinary | None:
    """The binary this process served before for ``version`` and ``platform`` if its file is still the one it
    served (a stat, no statement); None otherwise."""
    kept = _served_files.get((version, platform))
    if kept is None:
        return None
    binary, identity = kept
    if storage.stored_file_identity(binary.storage_name) != identity:
        _served_files.pop((version, platform), None)
        return None
    return binary


def release_binary_open(*, binary: ServedBinary) -> IO[bytes]:
    """An open handle on a served binary's bytes (Django streams them: ``none`` mode).

    Opening is the last check (no exists-then-open race): a handle taken before a re-upload's
    rename keeps reading the complete old file.
    """
    try:
        return storage.open_stored(binary.storage_name)
    except FileNotFoundError as exc:
        raise _missing(binary.version, binary.platform) from exc


def _no_binary(version: str, platform: str) -> str:
    return f"Release {version} has no binary for {platform}."


def _missing(version: str, platform: str) -> NotFound:
    detail = f"bcd {version} for {platform} is registered but its bytes are missing from storage."
    return NotFound(detail, code="not_found")
