"""Enrol nodes for simulated agents through the operator API, and keep their tokens in a file."""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from simulator.config import MAX_LIST_PAGES, NODES_PATH, POOLS_PATH, SimulatorError, list_page


@dataclass(frozen=True)
class EnrolledNode:
    name: str
    id: str
    pool_id: str
    token: str


def _operator_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def _detail(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {response.text[:300]}"


async def ensure_pools(
    client: httpx.AsyncClient,
    base_url: str,
    api_key: str,
    names: Sequence[str],
    *,
    create: bool = False,
    disruption_budget: float = 0.05,
) -> dict[str, str]:
    """Pool ids by name; missing pools are created when ``create``, else refused."""
    base_url = base_url.rstrip("/")
    ids: dict[str, str] = {}
    url: str | None = base_url + POOLS_PATH
    for _ in range(MAX_LIST_PAGES):
        if url is None:
            break
        response = await client.get(url, headers=_operator_headers(api_key))
        if not response.is_success:
            raise SimulatorError(f"listing pools failed: {_detail(response)}")
        try:
            rows, url = list_page(response.json(), url)
            ids.update({row["name"]: str(row["id"]) for row in rows})
        except (ValueError, TypeError, KeyError) as exc:
            raise SimulatorError(f"listing pools failed: not a list page: {response.text[:300]}") from exc
    else:
        raise SimulatorError("listing pools failed: too many pages")
    for name in names:
        if name in ids:
            continue
        if not create:
            raise SimulatorError(f"no pool named {name!r} (use --create-pools)")
        response = await client.post(
            base_url + POOLS_PATH,
            headers=_operator_headers(api_key),
            json={"name": name, "policy": {"disruptionBudget": disruption_budget}},
        )
        if response.status_code != 201:
            raise SimulatorError(f"creating pool {name!r} failed: {_detail(response)}")
        ids[name] = str(response.json()["id"])
    return {name: ids[name] for name in names}


@dataclass(frozen=True)
class LabelShare:
    """``key=value:share``: that share of the enrolled nodes carries the label (``--labels``)."""

    key: str
    value: str
    share: float


def parse_label_shares(text: str) -> list[LabelShare]:
    """``ring=canary:0.05,zone=a:0.5`` -> the shares; SimulatorError naming a malformed one.

    The server checks the keys and values (400 ``invalid_labels``); here only the shape and the share."""
    shares = []
    for item in (part.strip() for part in text.split(",")):
        label, colon, share = item.rpartition(":")
        key, equals, value = label.partition("=")
        try:
            fraction = float(share)
        except ValueError:
            fraction = -1.0
        if not (colon and equals and key) or not 0 <= fraction <= 1:
            raise SimulatorError(f"--labels: {item!r} is not key=value:share (a share in [0, 1])")
        shares.append(LabelShare(key=key, value=value, share=fraction))
    return shares


def labels_for(count: int, shares: Sequence[LabelShare], *, seed: int = 0) -> list[dict[str, str]]:
    """Each of ``count`` nodes' labels: per share, round(share x count) nodes chosen by the seed and the key."""
    labels: list[dict[str, str]] = [{} for _ in range(count)]
    for share in shares:
        chosen = random.Random(f"{seed}:{share.key}").sample(range(count), round(share.share * count))  # noqa: S311
        for index in chosen:
            labels[index][share.key] = share.value
    return labels


async def enroll(
    base_url: str,
    api_key: str,
    count: int,
    *,
    pools: Sequence[str] = ("default",),
    create_pools: bool = False,
    name_prefix: str | None = None,
    arch: str = "amd64",
    concurrency: int = 16,
    client: httpx.AsyncClient | None = None,
    labels: Sequence[Mapping[str, str]] | None = None,
) -> list[EnrolledNode]:
    """Create ``count`` nodes through ``POST /api/compute/nodes/``, round-robin over ``pools``.

    Names are ``{name_prefix}{i:05d}``; the default prefix is ``sim-<random>-``
    so that enrolling again does not collide with earlier runs.
    """
    if count < 1:
        raise SimulatorError("enrolling needs a count of at least 1")
    if not pools:
        raise SimulatorError("enrolling needs at least one pool")
    prefix = name_prefix if name_prefix is not None else f"sim-{secrets.token_hex(3)}-"
    base_url = base_url.rstrip("/")
    own = client is None
    client = client or httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=concurrency))
    try:
        pool_ids = await ensure_pools(client, base_url, api_key, pools, create=create_pools)
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int) -> EnrolledNode:
            name = f"{prefix}{index:05d}"
            pool_id = pool_ids[pools[index % len(pools)]]
            node_labels = dict(labels[index]) if labels else {}
            async with gate:
                response = await client.post(
                    base_url + NODES_PATH,
                    headers=_operator_headers(api_key),
                    json={"name": name, "poolId": pool_id, "arch": arch, "labels": node_labels},
                )
            if response.status_code != 201:
                raise SimulatorError(f"enrolling {name} failed: {_detail(response)}")
            body = response.json()
            return EnrolledNode(name=name, id=str(body["id"]), pool_id=pool_id, token=body["agentToken"])

        return list(await asyncio.gather(*(one(index) for index in range(count))))
    except httpx.HTTPError as exc:
        raise SimulatorError(f"enrolling failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            await client.aclose()


def write_tokens(path: str | Path, nodes: Iterable[EnrolledNode]) -> None:
    """Write enrolled nodes as a JSON list of {"name", "id", "poolId", "token"}, readable by the owner only."""
    rows = [{"name": node.name, "id": node.id, "poolId": node.pool_id, "token": node.token} for node in nodes]
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=1)
        handle.write("\n")


def read_tokens(path: str | Path) -> list[tuple[str, str]]:
    """``(name, token)`` pairs from a tokens file.

    Accepted: a JSON list of tokens or of objects with "token" (and "name"),
    a JSON object {"tokens": [...]}, or text with one token per line (or one
    JSON object per line); blank lines and lines starting with '#' are skipped.
    """
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    items: list[Any]
    if stripped.startswith("["):
        items = json.loads(stripped)
    elif stripped.startswith("{") and "\n{" not in stripped:
        body = json.loads(stripped)
        items = body.get("tokens", [body])
    else:
        items = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            items.append(json.loads(line) if line.startswith("{") else line)
    pairs = []
    for item in items:
        if isinstance(item, str):
            pairs.append(("", item))
        elif isinstance(item, dict) and isinstance(item.get("token"), str):
            pairs.append((str(item.get("name") or ""), item["token"]))
        else:
            raise SimulatorError(f"{path}: not a token: {item!r}"[:200])
    if not pairs:
        raise SimulatorError(f"{path}: no tokens")
    return pairs
