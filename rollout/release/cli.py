"""``python -m rollout.release``: offline release keys, signing and verification (docs/signing.md).

Verbs::

    keygen --out KEY.pem
    pin KEY.pem|PUB.pem
    sign --key KEY.pem [--key ...] --version V --sequence N --binary linux-amd64=PATH [--binary ...]
         [--protocol-version P] [--notes T] [--expires TS] --out RELEASE.json
    sign --key KEY.pem --envelope RELEASE.json [--out NEW.json]
    verify --pin P [--pin ...] [--threshold K] [--public-key PUB.pem ...] RELEASE.json
    root sign --key KEY.pem [--key ...] --version N --pin P [--pin ...] --threshold T [--expires TS] --out ROOT.json
    root sign --key KEY.pem --envelope ROOT.json [--out NEW.json]
    root verify --pin P [--pin ...] --threshold T ROOT2.json [ROOT3.json ...]

No database and no Django settings are needed. Every refusal is one line
``error: ...`` on stderr and exit status 1 (argparse usage errors exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rollout.release import dsse, keys
from rollout.release.cli_common import (
    CLIError,
    add_signatures,
    hash_file,
    integer_argument,
    load_public_key_file,
    load_signing_keys,
    parse_pins,
    print_signers,
    read_file,
    refuse_with_envelope,
    signed_copy_path,
    timestamp_argument,
    write_new,
)
from rollout.release.cli_root import add_root_parser
from rollout.release.errors import ReleaseError
from rollout.release.manifest import (
    format_timestamp,
    manifest_from_dict,
    manifest_to_bytes,
    parse_manifest,
)

PROG = "python -m rollout.release"


def _binary_argument(text: str) -> tuple[str, str]:
    platform, sep, path = text.partition("=")
    if not sep or not platform or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not PLATFORM=PATH (for example linux-amd64=./bcd)")
    return platform, path


def _summary(manifest: Any) -> str:
    platforms = ", ".join(sorted(manifest.binaries))
    expires = f"; expires {format_timestamp(manifest.expires)}" if manifest.expires else ""
    return f"bcd {manifest.version} (sequence {manifest.sequence}; {platforms}{expires})"


# --- verbs ----------------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    key = keys.generate_private_key()
    write_new(args.out, keys.private_key_pem(key), mode=0o600)
    print(keys.spki_pin(key.public_key()))
    print(f"wrote a new Ed25519 private key to {args.out} (mode 0600); the line above is its pin", file=sys.stderr)
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    print(keys.spki_pin(load_public_key_file(args.key)))
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
        sha256, size = hash_file(path)
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
    if args.expires is not None:
        data["expires"] = args.expires
    payload = manifest_to_bytes(manifest_from_dict(data))
    manifest = parse_manifest(payload)  # the very parser the server uses, over the very bytes signed

    envelope = dsse.sign_envelope(payload, private_keys)
    write_new(args.out, dsse.envelope_to_bytes(envelope), mode=0o644)
    print(f"wrote {args.out}: {_summary(manifest)}")
    print_signers(private_keys)
    return 0


def _sign_add(args: argparse.Namespace, private_keys: list[keys.PrivateKey]) -> int:
    refuse_with_envelope(
        [
            ("--version", args.version),
            ("--sequence", args.sequence),
            ("--binary", args.binary),
            ("--protocol-version", args.protocol_version),
            ("--notes", args.notes),
            ("--expires", args.expires),
        ],
        why="the manifest is already signed",
    )
    out = signed_copy_path(args.envelope, args.out)
    raw = read_file(args.envelope, limit=dsse.MAX_ENVELOPE_BYTES, what="envelope")
    parsed = dsse.parse_envelope(raw)
    if parsed.payload_type != dsse.PAYLOAD_TYPE:
        raise ReleaseError(
            "wrong_payload_type", f"the envelope's payloadType is {parsed.payload_type[:200]!r}, not a bcd release"
        )
    manifest = parse_manifest(parsed.payload)  # never sign what the server would refuse
    print(f"adding a signature to {args.envelope}: {_summary(manifest)}", file=sys.stderr)
    add_signatures(raw, envelope_path=args.envelope, out=out, private_keys=private_keys, payload_type=dsse.PAYLOAD_TYPE)
    print(f"wrote {out}: {_summary(manifest)}")
    print_signers(private_keys)
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    private_keys = load_signing_keys(args.key)
    if args.envelope:
        return _sign_add(args, private_keys)
    return _sign_new(args, private_keys)


def cmd_verify(args: argparse.Namespace) -> int:
    parse_pins(args.pin)
    if args.threshold < 1:
        raise CLIError("--threshold must be at least 1")
    public_keys = [load_public_key_file(path) for path in args.public_key or ()]
    # An oversize envelope is read just past the limit so that verification refuses it with its code.
    raw = read_file(args.envelope, limit=dsse.MAX_ENVELOPE_BYTES, what="envelope", truncate=True)
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
    sign.add_argument("--sequence", type=integer_argument, help="the release sequence: an integer >= 1, increasing")
    sign.add_argument(
        "--binary",
        action="append",
        type=_binary_argument,
        metavar="linux-ARCH=PATH",
        help="a platform and its binary file (repeatable)",
    )
    sign.add_argument("--protocol-version", type=integer_argument, metavar="P", help="agent protocol version (>= 1)")
    sign.add_argument("--notes", metavar="T", help="free text")
    sign.add_argument(
        "--expires",
        type=timestamp_argument,
        metavar="TS",
        help="when the release expires, RFC 3339 UTC ending in Z (for example 2030-01-31T00:00:00Z)",
    )
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
    verify.add_argument("--threshold", type=integer_argument, default=1, metavar="K", help="keys needed (default 1)")
    verify.add_argument(
        "--public-key",
        action="append",
        metavar="PUB.pem",
        help="a public key for signatures that do not carry one (repeatable; used only if its pin is given)",
    )
    verify.add_argument("envelope", metavar="RELEASE.json", help="the signed release")
    verify.set_defaults(func=cmd_verify)
    add_root_parser(verbs)
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
