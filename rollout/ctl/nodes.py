"""``nodes``' helpers: wave numbers as a person counts them, and node names instead of bare ids."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rollout.ctl.client import Api, ApiError

#: A pool with at most this many of the rows shown: its nodes are read one by one; with more, the pool's node
#: list is read page by page (a few requests per thousand nodes, whatever the rows).
ONE_BY_ONE = 20


def wave_index(rollout: dict[str, Any], wave: int) -> int:
    """The API's 0-based wave for ``--wave`` counted from 1, as ``status`` shows it; out of range: an error."""
    count = len(rollout.get("waves") or [])
    if not 1 <= wave <= count:
        raise ApiError(
            "invalid_wave",
            f"Wave {wave} is out of range: the rollout has {count} wave{'' if count == 1 else 's'}"
            f" (--wave counts from 1: 1 to {count}).",
        )
    return wave - 1


def node_names(api: Api, rows: list[dict[str, Any]]) -> dict[str, str]:
    """``{node id: name}`` for the rollout's rows: per pool, the few shown read one by one, or else the pool's
    node list (filtered by ``poolId``, 1,000 a page)."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        wanted[str(row.get("poolId"))].add(row["nodeId"])
    names: dict[str, str] = {}
    for pool, ids in wanted.items():
        if len(ids) <= ONE_BY_ONE:
            for node_id in sorted(ids):
                names[node_id] = api.get(f"nodes/{node_id}/")["name"]
        else:
            for node in api.pages("nodes/", {"poolId": pool, "limit": "1000"}):
                if node["id"] in ids:
                    names[node["id"]] = node["name"]
    return names
