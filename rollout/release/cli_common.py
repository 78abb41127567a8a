"""What the signing command line's verbs share: refusals, key files, safe writes, argument types."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import tempfile

from rollout.release import keys
from rollout.release.manifest import parse_timestamp

MAX_KEY_FILE_BYTES = 64 * 1024
CHUNK = 1 << 20
_DIGITS = re.compile(r"[0-9]+")


class CLIError(Exception):
    """A refusal of the command line: printed as ``error: <message>``, exit status 1."""


def read_file(path: str, *, limit: int, what: str, truncate: bool = False) -> bytes:
    """At most ``limit`` bytes of a file; a larger file is refused, or cut at ``limit + 1`` with ``truncate``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise CLIError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit and not truncate:
        raise CLIError(f"{what} {path} is larger than {limit} bytes")
    return data


def load_private_key_file(path: str) -> keys.PrivateKey:
    data = read_file(path, limit=MAX_KEY_FILE_BYTES, what="key file")
    try:
        return keys.load_private_key(data)
    except ValueError as exc:
        raise CLIError(f"{path}: {exc}") from None


def load_public_key_file(path: str) -> keys.PublicKey:
    data = read_file(path, limit=MAX_KEY_FILE_BYTES, what="key file")
    try:
        return keys.load_public_key(data)
    except ValueError as exc:
        raise CLIError(f"{path}: {exc}") from None


def write_new(path: str, data: bytes, *, mode: int) -> None:
    """Create ``path`` with ``mode``; refuse when it exists (also when it is a symlink)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise CLIError(f"{path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise CLIError(f"cannot create {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise CLIError(f"cannot write {path}: {exc.strerror or exc}") from None


def replace_file(path: str, data: bytes) -> None:
    """Write ``path`` atomically (a temporary file in the same folder, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        mode = 0o644
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".release-", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise CLIError(f"cannot write {path}: {exc.strerror or exc}") from None


def hash_file(path: str) -> tuple[str, int]:
    """Streaming SHA-256 and size of a file."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise CLIError(f"cannot read binary {path}: {exc.strerror or exc}") from None
    return digest.hexdigest(), size


def integer_argument(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    try:
        return int(text)
    except ValueError:  # more digits than int() accepts
        raise argparse.ArgumentTypeError(f"{text[:20]!r}... is too large") from None


def timestamp_argument(text: str) -> str:
    """An RFC 3339 UTC timestamp ending in Z, kept as typed (the manifest carries it as a string)."""
    try:
        parse_timestamp(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None
    return text
