"""Typed builders of test data shared by every area: signed releases, pools, nodes."""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from typing import Any

from rollout.release.dsse import PAYLOAD_TYPE, envelope_to_bytes, pae, sign_envelope
from rollout.release.keys import PrivateKey, generate_private_key, sign, spki_pin

DOWNLOADS_URL = "http://127.0.0.1:8000/api/compute/downloads"


@cache
def release_key(index: int) -> PrivateKey:
    """A stable release key per index for the whole test session (key generation is not free)."""
    return generate_private_key()


def pin(index: int) -> str:
    return spki_pin(release_key(index).public_key())


def rollout_settings(
    *, pins: list[str] | None = None, threshold: int = 1, downloads_url: str | None = DOWNLOADS_URL, every: int = 30
) -> dict[str, Any]:
    return {
        "release": {"pins": [pin(0)] if pins is None else pins, "threshold": threshold},
        "downloadsUrl": downloads_url,
        "every": every,
    }


def binary_bytes(version: str, arch: str = "amd64") -> bytes:
    """Deterministic fake bcd binary bytes for a version and arch."""
    return f"bcd {version} linux-{arch}\n".encode() * 64


def manifest(
    version: str = "1.0.0", sequence: int = 1, *, archs: tuple[str, ...] = ("amd64", "arm64"), **overrides: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "product": "bcd",
        "version": version,
        "sequence": sequence,
        "protocolVersion": 3,
        "binaries": {
            f"linux-{arch}": {
                "sha256": hashlib.sha256(binary_bytes(version, arch)).hexdigest(),
                "size": len(binary_bytes(version, arch)),
            }
            for arch in archs
        },
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ...}


def manifest_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def signed(payload: bytes | dict[str, Any], *keys: int) -> bytes:
    """A DSSE envelope over ``payload`` signed by release keys of the given indexes (default key 0)."""
    raw = manifest_bytes(payload) if isinstance(payload, dict) else payload
    return envelope_to_bytes(sign_envelope(raw, [release_key(i) for i in (keys or (0,))]))


def raw_envelope(payload: bytes, signatures: list[dict[str, Any]], payload_type: str = PAYLOAD_TYPE) -> bytes:
    return json.dumps(
        {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(), "signatures": signatures}
    ).encode()


def bare_signature(payload: bytes, key: int, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    """A signature object with only keyid and sig (as other DSSE tools write them)."""
    return {"keyid": pin(key), "sig": base64.b64encode(sign(release_key(key), pae(payload_type, payload))).decode()}


def fleet(
    tenant,
    pools: dict[str, tuple[int, str]],
    *,
    version: str = "0.9.0",
    protocol: int = 3,
    online: bool = True,
    arch: str = "amd64",
    now=None,
) -> dict[str, list]:
    """Pools with nodes (bulk-inserted) whose agents joined on ``version``: {pool name: [node, ...]}.

    ``pools`` maps a pool name to (node count, disruption budget as a string).
    """
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import Node, NodeSession, Pool
    from fleet.tokens import new_token, token_hash

    now = now or timezone.now()
    result: dict[str, list] = {}
    for name, (count, budget) in pools.items():
        pool = Pool.objects.create(tenant=tenant, name=name, disruption_budget=Decimal(budget))
        nodes = Node.objects.bulk_create(
            Node(
                tenant=tenant,
                pool=pool,
                name=f"{name}-{i:05d}",
                arch=arch,
                agent_token_hash=token_hash(new_token("at")),
            )
            for i in range(count)
        )
        NodeSession.objects.bulk_create(
            NodeSession(
                node=node,
                daemon_version=version,
                protocol_version=protocol,
                joined_at=now,
                last_seen_at=now,
                left_at=None if online else now,
            )
            for node in nodes
        )
        result[name] = nodes
    return result


def release_stored(body: dict[str, Any], *keys: int):
    """Register ``body`` signed by ``keys`` and upload each binary it lists (``binary_bytes``): a release a
    rollout may be created to (docs/controller.md#create refuses one whose binaries are not stored).

    The bytes go to ``settings.MEDIA_ROOT``: a test area points it at its ``tmp_path``.
    """
    import io

    from rollout.registry.binaries import release_binary_store
    from rollout.registry.releases import release_register

    release = release_register(envelope=signed(body, *keys)).release
    for platform in body["binaries"]:
        source = io.BytesIO(binary_bytes(body["version"], platform.removeprefix("linux-")))
        release_binary_store(version=body["version"], platform=platform, source=source)
    return release
