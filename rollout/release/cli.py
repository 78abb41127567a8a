"""``python -m rollout.release``: offline release keys, signing and verification.

Verbs (CONTRACT 7)::

    keygen --out KEY.pem
    pin KEY.pem|PUB.pem
    sign --key KEY.pem [--key ...] --version V --sequence N --binary linux-amd64=PATH [--binary ...]
         [--protocol-version P] [--notes T] --out RELEASE.json
    sign --key KEY.pem --envelope RELEASE.json [--out NEW.json]
    verify --pin P [--pin ...] [--threshold K] [--public-key PUB.pem ...] RELEASE.json

No database and no Django settings are needed. Every refusal is one line
``error: ...`` on stderr and exit status 1 (argparse usage errors exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from rollout.release import dsse, keys
from rollout.release.errors import ReleaseError
from rollout.release.manifest import (
    StrictJSONError,
    loads_strict,
    manifest_from_dict,
    manifest_to_bytes,
    parse_manifest,
)

PROG = "python -m rollout.release"
MAX_KEY_FILE_BYTES = 64 * 1024
CHUNK = 1 << 20
_DIGITS = re.compile(r"[0-9]+")


class CLIError(Exception):
    """A refusal of the command line: printed as ``error: <message>``, exit status 1."""


# --- small helpers -------------------------------------------------------------------


def _read(path: str, *, limit: int, what: str, truncate: bool = False) -> bytes:
    """At most ``limit`` bytes of a file; a larger file is refused, or cut at ``limit + 1`` with ``truncate``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise CLIError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit and not truncate:
        raise CLIError(f"{what} {path} is larger than {limit} bytes")
    return data


def _load_private_key(path: str) -> keys.PrivateKey:
    data = _read(path, limit=MAX_KEY_FILE_BYTES, what="key file")
    try:
        return keys.load_private_key(data)
    except ValueError as exc:
        raise CLIError(f"{path}: {exc}") from None


def _load_public_key(path: str) -> keys.PublicKey:
    data = _read(path, limit=MAX_KEY_FILE_BYTES, what="key file")
    try:
        return keys.load_public_key(data)
    except ValueError as exc:
        raise CLIError(f"{path}: {exc}") from None


def _write_new(path: str, data: bytes, *, mode: int) -> None:
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


def _replace(path: str, data: bytes) -> None:
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


def _hash_file(path: str) -> tuple[str, int]:
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


def _integer(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    try:
        return int(text)
    except ValueError:  # more digits than int() accepts
        raise argparse.ArgumentTypeError(f"{text[:20]!r}... is too large") from None


def _binary_argument(text: str) -> tuple[str, str]:
    platform, sep, path = text.partition("=")
    if not sep or not platform or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not PLATFORM=PATH (for example linux-amd64=./bcd)")
    return platform, path


def _summary(manifest: Any) -> str:
    platforms = ", ".join(sorted(manifest.binaries))
    return f"bcd {manifest.version} (sequence {manifest.sequence}; {platforms})"


# --- verbs ----------------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    key = keys.generate_private_key()
    _write_new(args.out, keys.private_key_pem(key), mode=0o600)
    print(keys.spki_pin(key.public_key()))
    print(f"wrote a new Ed25519 private key to {args.out} (mode 0600); the line above is its pin", file=sys.stderr)
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    print(keys.spki_pin(_load_public_key(args.key)))
    return 0


def _sign_new(args: argparse.Namespace, private_keys: list[keys.PrivateKey]) -> int:
    missing = [
        flag
        for flag, value in (("--version", args.version), ("--sequence", args.sequence), ("--binary", args.binary))
        if value is None
    ]
    if not args.out:
        missing.append("--out")
    if missing:
        raise CLIError(f"signing a new release needs {', '.join(missing)} (or --envelope to add a signature)")
    if os.path.lexists(args.out):
        raise CLIError(f"{args.out} already exists; refusing to overwrite it (use --envelope to add a signature)")

    binaries: dict[str, dict[str, Any]] = {}
    for platform, path in args.binary:
        if platform in binaries:
            raise CLIError(f"--binary {platform} is given twice")
        sha256, size = _hash_file(path)
        binaries[platform] = {"sha256": sha256, "size": size}
    data: dict[str, Any] = {
        "product": "bcd",
        "version": args.version,
        "sequence": args.sequence,
        "binaries": binaries,
    }
    if args.protocol_version is not None:
        data["protocolVersion"] = args.protocol_version
    if args.notes is not None:
        data["notes"] = args.notes
    payload = manifest_to_bytes(manifest_from_dict(data))
    manifest = parse_manifest(payload)  # the very parser the server uses, over the very bytes signed

    envelope = dsse.sign_envelope(payload, private_keys)
    _write_new(args.out, dsse.envelope_to_bytes(envelope), mode=0o644)
    print(f"wrote {args.out}: {_summary(manifest)}")
    for key in private_keys:
        print(f"signed by {keys.spki_pin(key.public_key())}")
    return 0


def _sign_add(args: argparse.Namespace, private_keys: list[keys.PrivateKey]) -> int:
    extra = [
        flag
        for flag, value in (
            ("--version", args.version),
            ("--sequence", args.sequence),
            ("--binary", args.binary),
            ("--protocol-version", args.protocol_version),
            ("--notes", args.notes),
        )
        if value is not None
    ]
    if extra:
        raise CLIError(f"{', '.join(extra)} cannot be combined with --envelope: the manifest is already signed")
    out = args.out or args.envelope
    if args.out and os.path.abspath(args.out) != os.path.abspath(args.envelope) and os.path.lexists(args.out):
        raise CLIError(f"{args.out} already exists; refusing to overwrite it")

    raw = _read(args.envelope, limit=dsse.MAX_ENVELOPE_BYTES, what="envelope")
    parsed = dsse.parse_envelope(raw)
    if parsed.payload_type != dsse.PAYLOAD_TYPE:
        raise ReleaseError(
            "wrong_payload_type", f"the envelope's payloadType is {parsed.payload_type[:200]!r}, not a bcd release"
        )
    manifest = parse_manifest(parsed.payload)  # never sign what the server would refuse
    try:
        envelope = loads_strict(raw)
    except StrictJSONError as exc:  # pragma: no cover (parse_envelope already read it)
        raise CLIError(f"{args.envelope}: the envelope {exc}") from None
    print(f"adding a signature to {args.envelope}: {_summary(manifest)}", file=sys.stderr)
    for key in private_keys:
        try:
            envelope = dsse.add_signature(envelope, key)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    data = dsse.envelope_to_bytes(envelope)
    if out == args.envelope or os.path.abspath(out) == os.path.abspath(args.envelope):
        _replace(out, data)
    else:
        _write_new(out, data, mode=0o644)
    print(f"wrote {out}: {_summary(manifest)}")
    for key in private_keys:
        print(f"signed by {keys.spki_pin(key.public_key())}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    private_keys = [_load_private_key(path) for path in args.key]
    pins = [keys.spki_pin(key.public_key()) for key in private_keys]
    if len(set(pins)) != len(pins):
        raise CLIError("the same key is given twice with --key; each key signs once")
    if args.envelope:
        return _sign_add(args, private_keys)
    return _sign_new(args, private_keys)


def cmd_verify(args: argparse.Namespace) -> int:
    for pin in args.pin:
        try:
            keys.parse_pin(pin)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    if args.threshold < 1:
        raise CLIError("--threshold must be at least 1")
    public_keys = [_load_public_key(path) for path in args.public_key or ()]
    # An oversize envelope is read just past the limit so that verification refuses it with its code.
    raw = _read(args.envelope, limit=dsse.MAX_ENVELOPE_BYTES, what="envelope", truncate=True)
    verified = dsse.verify_envelope(raw, pins=args.pin, threshold=args.threshold, public_keys=public_keys)
    print(json.dumps(json.loads(verified.payload), indent=2, sort_keys=True, ensure_ascii=False))
    print(
        f"verified: {len(verified.signer_pins)} distinct pinned key(s) signed (threshold {args.threshold}): "
        + ", ".join(verified.signer_pins),
        file=sys.stderr,
    )
    return 0


# --- parser ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Offline keys, signing and verification of bcd releases (DSSE envelopes). See docs/signing.md.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    keygen = verbs.add_parser(
        "keygen",
        help="write a new Ed25519 private key and print its pin",
        description="Write a new Ed25519 private key (unencrypted PKCS#8 PEM, mode 0600) and print its pin. "
        "Refuses to overwrite an existing file.",
    )
    keygen.add_argument("--out", required=True, metavar="KEY.pem", help="where to write the private key")
    keygen.set_defaults(func=cmd_keygen)

    pin = verbs.add_parser(
        "pin",
        help="print the pin of a private or public key",
        description="Print sha256/<base64 of SHA-256(DER SubjectPublicKeyInfo)> of a private or public key "
        "(PEM or DER).",
    )
    pin.add_argument("key", metavar="KEY.pem|PUB.pem", help="a private or public key file")
    pin.set_defaults(func=cmd_pin)

    sign = verbs.add_parser(
        "sign",
        help="sign a new release, or add a signature to a signed one",
        description="New release: hash the binaries, write the manifest and sign it with every --key into --out. "
        "With --envelope: add one more signature (per --key) to an existing envelope, in place or into --out.",
    )
    sign.add_argument("--key", action="append", required=True, metavar="KEY.pem", help="a private key (repeatable)")
    sign.add_argument("--version", help="the release version, for example 1.4.0")
    sign.add_argument("--sequence", type=_integer, help="the release sequence: an integer >= 1, always increasing")
    sign.add_argument(
        "--binary",
        action="append",
        type=_binary_argument,
        metavar="linux-ARCH=PATH",
        help="a platform and its binary file (repeatable)",
    )
    sign.add_argument("--protocol-version", type=_integer, metavar="P", help="the agent protocol version (>= 1)")
    sign.add_argument("--notes", metavar="T", help="free text")
    sign.add_argument("--envelope", metavar="RELEASE.json", help="add a signature to this signed release")
    sign.add_argument("--out", metavar="RELEASE.json", help="where to write the envelope")
    sign.set_defaults(func=cmd_sign)

    verify = verbs.add_parser(
        "verify",
        help="verify a signed release offline and print its manifest",
        description="Verify that at least --threshold distinct pinned keys signed the release, then print the "
        "manifest. Exit status 1 with the reason when it does not verify.",
    )
    verify.add_argument("--pin", action="append", required=True, metavar="P", help="a trusted key's pin (repeatable)")
    verify.add_argument("--threshold", type=_integer, default=1, metavar="K", help="distinct keys needed (default 1)")
    verify.add_argument(
        "--public-key",
        action="append",
        metavar="PUB.pem",
        help="a public key for signatures that do not carry one (repeatable; used only if its pin is given)",
    )
    verify.add_argument("envelope", metavar="RELEASE.json", help="the signed release")
    verify.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ReleaseError as exc:
        print(f"error: {exc.code}: {exc.detail}", file=sys.stderr)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a refusal is never a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1
