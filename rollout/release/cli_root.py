"""``python -m rollout.release root ...``: sign and verify roots of the key chain offline.

::

    root sign --key KEY.pem [--key ...] --version N --pin P [--pin ...] --threshold T [--expires TS] --out ROOT.json
    root sign --key KEY.pem --envelope ROOT.json [--out NEW.json]
    root verify --pin P [--pin ...] --threshold T ROOT2.json [ROOT3.json ...]

A new root must be signed by the threshold of the current root's keys and by
its own threshold of its own keys (docs/signing.md#rotating-the-release-keys):
each key holder adds their signature with ``root sign --envelope``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rollout.release import dsse, keys
from rollout.release.cli_common import (
    CLIError,
    add_signatures,
    integer_argument,
    load_signing_keys,
    parse_pins,
    print_signers,
    read_file,
    refuse_with_envelope,
    signed_copy_path,
    timestamp_argument,
    write_new,
)
from rollout.release.manifest import format_timestamp, parse_timestamp
from rollout.release.root import (
    ROOT_PAYLOAD_TYPE,
    Root,
    parse_root,
    parse_root_envelope,
    root_from_pins,
    root_to_bytes,
    sign_root,
    verify_root_step,
)


def _summary(root: Root) -> str:
    expires = f", expires {format_timestamp(root.expires)}" if root.expires else ""
    return f"root {root.version}: {root.threshold} of {len(root.pins)} key(s){expires}"


def _sign_new(args: argparse.Namespace, private_keys: list[keys.PrivateKey]) -> int:
    missing = [
        flag
        for flag, value in (
            ("--version", args.version),
            ("--pin", args.pin),
            ("--threshold", args.threshold),
            ("--out", args.out),
        )
        if value is None
    ]
    if missing:
        raise CLIError(f"signing a new root needs {', '.join(missing)} (or --envelope to add a signature)")
    if os.path.lexists(args.out):
        raise CLIError(f"{args.out} already exists; refusing to overwrite it (use --envelope to add a signature)")
    if args.version < 2:
        raise CLIError("--version must be at least 2: root 1 is the configured pins and threshold")
    expires = parse_timestamp(args.expires) if args.expires else None
    root = Root(version=args.version, pins=tuple(parse_pins(args.pin)), threshold=args.threshold, expires=expires)
    parse_root(root_to_bytes(root))  # the very parser the server and the agents use
    envelope = sign_root(root, private_keys)
    write_new(args.out, dsse.envelope_to_bytes(envelope), mode=0o644)
    print(f"wrote {args.out}: {_summary(root)}")
    print_signers(private_keys)
    return 0


def _sign_add(args: argparse.Namespace, private_keys: list[keys.PrivateKey]) -> int:
    refuse_with_envelope(
        [
            ("--version", args.version),
            ("--pin", args.pin),
            ("--threshold", args.threshold),
            ("--expires", args.expires),
        ],
        why="the root is already written",
    )
    out = signed_copy_path(args.envelope, args.out)
    raw = read_file(args.envelope, limit=dsse.MAX_ENVELOPE_BYTES, what="envelope")
    _, root = parse_root_envelope(raw)  # never sign what the server would refuse
    print(f"adding a signature to {args.envelope}: {_summary(root)}: {', '.join(root.pins)}", file=sys.stderr)
    add_signatures(raw, envelope_path=args.envelope, out=out, private_keys=private_keys, payload_type=ROOT_PAYLOAD_TYPE)
    print(f"wrote {out}: {_summary(root)}")
    print_signers(private_keys)
    return 0


def cmd_root_sign(args: argparse.Namespace) -> int:
    private_keys = load_signing_keys(args.key)
    if args.envelope:
        return _sign_add(args, private_keys)
    return _sign_new(args, private_keys)


def cmd_root_verify(args: argparse.Namespace) -> int:
    try:
        current = root_from_pins(parse_pins(args.pin), args.threshold)
    except ValueError as exc:
        raise CLIError(f"root 1: {exc}") from None
    for path in args.roots:
        raw = read_file(path, limit=dsse.MAX_ENVELOPE_BYTES, what="root", truncate=True)
        verified = verify_root_step(current, raw)  # ReleaseError: "error: <code>: <detail>", exit 1
        current = verified.root
        print(
            f"{path}: {_summary(current)}; signed by {len(verified.signed_by_previous)} key(s) of root "
            f"{current.version - 1} and {len(verified.signed_by_itself)} of its own",
            file=sys.stderr,
        )
    shown = {"version": current.version, "pins": list(current.pins), "threshold": current.threshold}
    if current.expires is not None:
        shown["expires"] = format_timestamp(current.expires)
    print(json.dumps(shown, indent=2))
    return 0


def add_root_parser(verbs: Any) -> None:
    """The ``root`` verb and its ``sign`` and ``verify``, on the CLI's subparsers."""
    root = verbs.add_parser(
        "root",
        help="sign or verify roots of the key chain (rotating the release keys)",
        description="Roots of the key chain: root 1 is the configured pins and threshold; each next root is "
        "signed by the current root's keys and by its own. See docs/signing.md.",
    )
    root_verbs = root.add_subparsers(dest="root_verb", required=True, metavar="VERB")

    sign = root_verbs.add_parser(
        "sign",
        help="write and sign a new root, or add a signature to one",
        description="New root: write {type, version, pins, threshold, expires?} and sign it with every --key into "
        "--out. With --envelope: add one more signature (per --key), in place or into --out.",
    )
    sign.add_argument("--key", action="append", required=True, metavar="KEY.pem", help="a private key (repeatable)")
    sign.add_argument("--version", type=integer_argument, metavar="N", help="the new root's version (current + 1)")
    sign.add_argument("--pin", action="append", metavar="P", help="a pin of the new root (repeatable)")
    sign.add_argument("--threshold", type=integer_argument, metavar="T", help="distinct keys a release needs")
    sign.add_argument("--expires", type=timestamp_argument, metavar="TS", help="RFC 3339 UTC ending in Z")
    sign.add_argument("--envelope", metavar="ROOT.json", help="add a signature to this root")
    sign.add_argument("--out", metavar="ROOT.json", help="where to write the envelope")
    sign.set_defaults(func=cmd_root_sign)

    verify = root_verbs.add_parser(
        "verify",
        help="verify a chain of roots offline from root 1",
        description="Verify ROOT2.json, ROOT3.json, ... in order from root 1 (--pin, --threshold): each signed by "
        "the previous root's threshold of its keys and by its own. Prints the newest root; exit status 1 with "
        "the reason when a step does not verify.",
    )
    verify.add_argument("--pin", action="append", required=True, metavar="P", help="a pin of root 1 (repeatable)")
    verify.add_argument("--threshold", type=integer_argument, required=True, metavar="T", help="root 1's threshold")
    verify.add_argument("roots", nargs="+", metavar="ROOT.json", help="roots 2, 3, ... in order")
    verify.set_defaults(func=cmd_root_verify)
