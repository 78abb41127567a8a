"""What the signing command line's verbs share: refusals, key files, safe writes, argument types."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from typing import Any

from rollout.release import dsse, keys
from rollout.release.manifest import StrictJSONError, loads_strict, parse_timestamp

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


def load_signing_keys(paths: Sequence[str]) -> list[keys.PrivateKey]:
    """The ``--key`` files of a signing verb: each a different key (a key signs once)."""
    private_keys = [load_private_key_file(path) for path in paths]
    pins = [keys.spki_pin(key.public_key()) for key in private_keys]
    if len(set(pins)) != len(pins):
        raise CLIError("the same key is given twice with --key; each key signs once")
    return private_keys


def parse_pins(values: Sequence[str]) -> list[str]:
    """``--pin`` values, each refused unless it is a pin (``ed25519:<base64>`` of a public key)."""
    for pin in values:
        try:
            keys.parse_pin(pin)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    return list(values)


def refuse_with_envelope(options: Sequence[tuple[str, object]], *, why: str) -> None:
    """``--envelope`` adds signatures to a document already written: the options that would write it are refused."""
    given = [flag for flag, value in options if value is not None]
    if given:
        raise CLIError(f"{', '.join(given)} cannot be combined with --envelope: {why}")


def signed_copy_path(envelope_path: str, out: str | None) -> str:
    """Where ``--envelope`` writes: ``--out``, or the envelope itself; never over another existing file."""
    path = out or envelope_path
    if os.path.abspath(path) != os.path.abspath(envelope_path) and os.path.lexists(path):
        raise CLIError(f"{path} already exists; refusing to overwrite it")
    return path


def add_signatures(
    raw: bytes, *, envelope_path: str, out: str, private_keys: Sequence[keys.PrivateKey], payload_type: str
) -> None:
    """Sign the envelope ``raw`` (read from ``envelope_path``, already verified parseable by the caller) with
    each key, its payload kept byte for byte, and write it to ``out``: in place when it is the same file."""
    try:
        envelope: dict[str, Any] = loads_strict(raw)
    except StrictJSONError as exc:  # pragma: no cover (the caller's parser already read it)
        raise CLIError(f"{envelope_path}: the envelope {exc}") from None
    for key in private_keys:
        try:
            envelope = dsse.add_signature(envelope, key, payload_type=payload_type)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    data = dsse.envelope_to_bytes(envelope)
    if os.path.abspath(out) == os.path.abspath(envelope_path):
        replace_file(out, data)
    else:
        write_new(out, data, mode=0o644)


def print_signers(private_keys: Sequence[keys.PrivateKey]) -> None:
    for key in private_keys:
        print(f"signed by {keys.spki_pin(key.public_key())}")


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
