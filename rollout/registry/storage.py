"""Where binaries' bytes live, and how a download reaches them (docs/operations.md#binary-delivery).

Two stores, chosen by ``ROLLOUT_DOWNLOADS_OFFLOAD`` in the settings:

- the file system (``MEDIA_ROOT``): Django streams the bytes (``none``) or hands the file to nginx
  with X-Accel-Redirect (``accel``);
- S3-compatible object storage through django-storages (``redirect``): Django answers 302 to a
  presigned URL valid ``ROLLOUT_DOWNLOADS_PRESIGN_SECONDS`` (at most 15 minutes).

Storing is the same in both: the bytes are streamed to a temporary name in the same store while
they are counted and hashed, and become visible under the binary's name only after their size and
sha256 matched the signed manifest (an atomic rename; in S3, a server-side copy of the finished
temporary object, which appears whole or not at all).
"""

from __future__ import annotations

import enum
import hashlib
import os
import sys
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import quote

from django.conf import settings
from django.core.files.storage import FileSystemStorage, Storage, default_storage
from django.utils.http import content_disposition_header

from core.errors import InvalidInput

# A version's bytes never change: any cache or CDN may keep them for a year.
IMMUTABLE = "public, max-age=31536000, immutable"
CONTENT_TYPE = "application/octet-stream"
# nginx's internal location for the stored files (docker/nginx.conf): reachable only through X-Accel-Redirect.
ACCEL_PREFIX = "/_binaries/"
MAX_PRESIGN_SECONDS = 15 * 60
# The sha256 travels with an S3 object as user metadata: x-amz-meta-checksum-sha256 on its answers.
S3_SHA256_METADATA = "checksum-sha256"
_CHUNK = 1 << 20


class Offload(enum.StrEnum):
    """Who moves a download's bytes: Django (``none``), nginx (``accel``) or object storage (``redirect``)."""

    NONE = "none"
    ACCEL = "accel"
    REDIRECT = "redirect"


def offload() -> Offload:
    """The configured mode (the system checks refuse an unknown one; ``none`` until they are fixed)."""
    try:
        return Offload(getattr(settings, "ROLLOUT_DOWNLOADS_OFFLOAD", Offload.NONE))
    except ValueError:
        return Offload.NONE


def is_object_storage(storage: Storage) -> bool:
    """Is it django-storages' S3Storage? Without importing boto3 (tens of MiB) when it is not."""
    kind = storage.__class__  # a lazy storage (default_storage) is set up here, importing its backend
    s3 = sys.modules.get("storages.backends.s3")
    return s3 is not None and issubclass(kind, s3.S3Storage)


def download_filename(version: str, platform: str) -> str:
    return f"bcd-{version}-{platform}"


def attachment(version: str, platform: str) -> str:
    """The Content-Disposition every path sends: ``attachment; filename="bcd-<version>-<platform>"``."""
    header = content_disposition_header(as_attachment=True, filename=download_filename(version, platform))
    assert header is not None  # an attachment always has one
    return header


# --- reading -------------------------------------------------------------------------------------


def stored(name: str) -> bool:
    """Do the bytes exist in the store (a stat, or a HEAD of the object)?"""
    return bool(default_storage.exists(name))


def stored_file_identity(name: str) -> tuple[int, int, int] | None:
    """The stored file's inode, size and modification time (a stat; file system only), None when it cannot be
    read (missing, unreadable). Bytes stored again are a new file (an atomic rename): a new identity."""
    try:
        stat = os.stat(default_storage.path(name))
    except (OSError, NotImplementedError):
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def open_stored(name: str) -> IO[bytes]:
    """An open handle on stored bytes (file system only: ``none`` mode); FileNotFoundError when missing."""
    return default_storage.open(name, "rb")


def accel_location(name: str) -> str:
    """The X-Accel-Redirect target of stored bytes: nginx's internal location over MEDIA_ROOT."""
    return ACCEL_PREFIX + quote(name)


def presigned_url(name: str, *, method: str, version: str, platform: str) -> str:
    """A URL of the object signed for ``method`` (GET or HEAD), valid ROLLOUT_DOWNLOADS_PRESIGN_SECONDS."""
    raw = getattr(settings, "ROLLOUT_DOWNLOADS_PRESIGN_SECONDS", MAX_PRESIGN_SECONDS)
    # A bad value is the system checks' to report (rollout.E023); never a URL that lives longer.
    seconds = raw if type(raw) is int and 1 <= raw <= MAX_PRESIGN_SECONDS else MAX_PRESIGN_SECONDS
    # Same Content-Disposition as the other paths; Content-Type and Cache-Control are the object's own.
    parameters = {"ResponseContentDisposition": attachment(version, platform)}
    store: Any = default_storage  # django-storages' S3Storage (the system checks make sure)
    url: str = store.url(name, parameters=parameters, expire=seconds, http_method=method)
    return url


# --- storing -------------------------------------------------------------------------------------


class _CheckedReader:
    """Reads ``source`` once, counting and hashing; stops one byte past ``limit`` (already too long)."""

    def __init__(self, source: IO[bytes], limit: int):
        self._source = source
        self._limit = limit
        self.size = 0
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        left = self._limit + 1 - self.size
        if left <= 0:
            return b""
        chunk = self._source.read(min(left, _CHUNK if size is None or size < 0 else size))
        self.size += len(chunk)
        self.digest.update(chunk)
        return chunk

    def mismatch(self, *, version: str, platform: str, size: int, sha256: str) -> InvalidInput | None:
        if self.size != size:
            has = f"more than {size}" if self.size > size else str(self.size)  # reading stopped one byte past
            return InvalidInput(
                f"The file has {has} bytes; the manifest of {version} says {size} for {platform}.",
                code="size_mismatch",
            )
        if self.digest.hexdigest() != sha256:
            return InvalidInput(
                f"The file's sha256 {self.digest.hexdigest()} differs from the manifest's {sha256}.",
                code="sha256_mismatch",
            )
        return None


def store_checked(name: str, source: IO[bytes], *, version: str, platform: str, size: int, sha256: str) -> None:
    """Store ``source`` under ``name`` only if it has ``size`` bytes hashing to ``sha256``; else InvalidInput.

    Memory stays bounded whatever the size (a chunk at a time); a refused or interrupted upload
    leaves the stored bytes as they were and nothing under ``name`` that was not checked.
    """
    reader = _CheckedReader(source, size)
    checks = {"version": version, "platform": platform, "size": size, "sha256": sha256}
    storage: Any = default_storage
    if is_object_storage(storage):
        _store_object(storage, name, reader, checks)
    elif isinstance(storage, FileSystemStorage):
        _store_file(Path(storage.path(name)), reader, checks)
    else:  # the system checks refuse other stores
        raise TypeError(f"binaries cannot be stored in {type(storage).__name__}")


def _store_file(target: Path, reader: _CheckedReader, checks: dict[str, Any]) -> None:
    """A temporary file beside the target, fsynced, then renamed over it (atomic on POSIX)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in iter(lambda: reader.read(_CHUNK), b""):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        refusal = reader.mismatch(**checks)
        if refusal is not None:
            raise refusal
        os.chmod(temporary, settings.FILE_UPLOAD_PERMISSIONS or 0o644)  # mkstemp makes it 0600
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    descriptor = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself survives a crash
    finally:
        os.close(descriptor)


def _store_object(storage: Any, name: str, reader: _CheckedReader, checks: dict[str, Any]) -> None:
    """A temporary object, then a server-side copy to ``name`` with the headers downloads answer."""
    from boto3.s3.transfer import TransferConfig

    client = storage.connection.meta.client
    bucket = storage.bucket_name
    path = PurePosixPath(name)
    temporary = str(path.with_name(f".{path.name}.{uuid.uuid4().hex}.part"))
    # 8 MiB parts, two in flight: memory stays a few parts whatever the binary's size.
    transfer = TransferConfig(multipart_chunksize=8 << 20, max_concurrency=2)
    try:
        client.upload_fileobj(reader, bucket, temporary, ExtraArgs={"ContentType": CONTENT_TYPE}, Config=transfer)
        refusal = reader.mismatch(**checks)
        if refusal is not None:
            raise refusal
        client.copy(
            {"Bucket": bucket, "Key": temporary},
            bucket,
            name,
            ExtraArgs={
                "MetadataDirective": "REPLACE",
                "ContentType": CONTENT_TYPE,
                "CacheControl": IMMUTABLE,
                "ContentDisposition": attachment(checks["version"], checks["platform"]),
                "Metadata": {S3_SHA256_METADATA: checks["sha256"]},
            },
            Config=transfer,
        )
    finally:
        client.delete_object(Bucket=bucket, Key=temporary)
