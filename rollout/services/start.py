"""Starting nodes within each pool's budget: the current wave's pending nodes, and convergence after completion.

Under each pool's row lock (taken in pool id order by every worker), so two
workers starting at once never exceed a budget (CONTRACT 5).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet
from django.utils import timezone

from fleet.interface import (
    Command,
    Node,
    commands_enqueue,
    offline_verdicts_trusted,
    online_node_q,
    pool_budget,
    pool_windows_open,
)
from rollout.dispatch import TIMEOUTS_DUE_TASK, publish_on_commit
from rollout.models import NodeUpgrade, Release, ReleaseBinary, ReleaseBlock, Rollout
from rollout.services.daemons import SignedRelease, min_protocol_version, set_daemons, signed_releases
from rollout.services.transitions import (
    converge_upgrades,
    skip_upgrades,
    start_upgrades,
)

log = structlog.get_logger("rollout")

State = NodeUpgrade.State
# Pending rows read per query while looking for startable nodes past offline ones.
START_LOOKAHEAD = 100


def rollout_start_nodes(*, rollout: Rollout, now: datetime) -> tuple[int, int]:
    """Start pending nodes of the current wave within each pool's budget. Returns (started, skipped)."""
    pending = NodeUpgrade.objects.filter(rollout=rollout, wave=rollout.current_wave, state=State.PENDING)
    waiting = sorted(rollout.pools.filter(Exists(pending.filter(pool_id=OuterRef("pk")))).values_list("id", flat=True))
    # CONTRACT 9.1: a pool's nodes start only while one of its maintenance windows is open. A closed
    # pool's pending nodes wait (they are not skipped); the periodic tick sees the window open.
    open_now = pool_windows_open(pool_ids=waiting, now=now)
    pool_ids = [pool_id for pool_id in waiting if pool_id in open_now]
    if not pool_ids:
        return 0, 0
    release = rollout.release
    if release.expires_at is not None and release.expires_at <= now:
        return 0, 0  # never sent (docs/signing.md#expiry): the tick pauses the rollout
    signed = SignedRelease(
        version=release.version,
        envelope=release.envelope,
        sha256_by_arch=dict(ReleaseBinary.objects.filter(release=release).values_list("arch", "sha256")),
    )
    # On the session row the chunk joins anyway: an EXISTS here was planned as a hash of every
    # session of the fleet, once per pool (0.3 s per pool at 100,000 nodes).
    online = ExpressionWrapper(_on_node(online_node_q(now=now)), output_field=BooleanField())
    timeout = timedelta(seconds=rollout.upgrade_timeout_seconds)
    minimum_protocol = min_protocol_version()
    # Right after the server could not hear its fleet (its database or web tier was down), a
    # node that looks offline may well be running: wait for it instead of skipping it.
    offline_is_down = offline_verdicts_trusted(now=now)

    to_start: list[tuple[int, UUID]] = []  # (upgrade, node) ids
    sections: list[tuple[UUID, dict[str, Any]]] = []
    old_agents: list[tuple[UUID, dict[str, Any]]] = []
    skipped: dict[str, list[int]] = defaultdict(list)
    for pool_id in pool_ids:  # sorted: every worker takes pool locks in the same order
        room = pool_budget(pool_id=pool_id, lock=True).available
        cursor = -1
        while room > 0:
            limit = room + START_LOOKAHEAD
            chunk = list(
                pending.filter(pool_id=pool_id, position__gt=cursor)
                .annotate(online=online)
                .order_by("position")
                .values(
                    "id",
                    "node_id",
                    "position",
                    "online",
                    "node__arch",
                    "node__session__protocol_version",
                    "node__session__joined_at",
                )[:limit]
            )
            for row in chunk:
                if room == 0:
                    break
                cursor = row["position"]
                arch = row["node__arch"]
                if not row["online"]:
                    if offline_is_down or row["node__session__joined_at"] is None:  # never joined: never ran
                        skipped[NodeUpgrade.Reason.OFFLINE].append(row["id"])
                    continue
                section = signed.section(arch)
                if section is None:
                    skipped[NodeUpgrade.Reason.NO_BINARY].append(row["id"])
                    continue
                to_start.append((row["id"], row["node_id"]))
                sections.append((row["node_id"], section))
                if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                    old_agents.append((row["node_id"], section))
                room -= 1
            if len(chunk) < limit:
                break

    for reason, ids in skipped.items():
        skip_upgrades(rollout=rollout, ids=ids, reason=reason, at=now)
    started = 0
    if to_start:
        # Start time is read under every pool lock: a node is never recorded as started before
        # the settle that freed its slot committed. One time for the tick: one UPDATE, one sweep.
        started_at = max(now, timezone.now())
        started = start_upgrades(rollout=rollout, starts=to_start, started_at=started_at, deadline=started_at + timeout)
        _timeouts_due(rollout_id=rollout.id, at=started_at + timeout)
    if started:
        _send_out(sections=sections, old_agents=old_agents)
    return started, sum(len(ids) for ids in skipped.values())


def _on_node(q: Q, prefix: str = "node__") -> Q:
    """``q``, a Q on Node, as a Q on rows that reference the node (``node__`` before each lookup)."""
    # A Q's leaves are (lookup, value) pairs.
    children = [_on_node(c, prefix) if isinstance(c, Q) else (prefix + c[0], c[1]) for c in q.children]  # type: ignore[index]
    return Q(*children, _connector=q.connector, _negated=q.negated)


def _timeouts_due(*, rollout_id: UUID, at: datetime) -> None:
    """One timeout sweep per start time (not per node): it settles exactly the nodes overdue then."""
    publish_on_commit(TIMEOUTS_DUE_TASK, args=[str(rollout_id)], eta=at)


def _send_out(*, sections: list[tuple[UUID, dict[str, Any]]], old_agents: list[tuple[UUID, dict[str, Any]]]) -> None:
    """Started nodes get their spec.daemon; agents below the minimum protocol also a daemon.upgrade command."""
    set_daemons(sections)
    if old_agents:
        commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)


# --- convergence after completion (CONTRACT 9.6) ---------------------------------------------


def convergence_candidates(*, now: datetime) -> QuerySet[NodeUpgrade]:
    """Rows that converge: skipped (offline) in a completed rollout, node online again on an older version.

    Not when a newer rollout has a row for the node (it took the node: this ends here), another
    row holds the node, the tenant blocked the release, the release expired (docs/signing.md#expiry)
    or has no binary for its arch.
    An older version: one that is not a registered release of the target's sequence or higher.
    """
    node = OuterRef("node_id")
    newer = NodeUpgrade.objects.filter(node_id=node, rollout__created_at__gt=OuterRef("rollout__created_at"))
    claimed = NodeUpgrade.objects.filter(node_id=node, claims_node=True)
    not_older = Release.objects.filter(
        version=OuterRef("node__session__daemon_version"), sequence__gte=OuterRef("rollout__release__sequence")
    )
    blocked = ReleaseBlock.objects.filter(
        tenant_id=OuterRef("rollout__tenant_id"), release_id=OuterRef("rollout__release_id")
    )
    binary = ReleaseBinary.objects.filter(release_id=OuterRef("rollout__release_id"), arch=OuterRef("node__arch"))
    return (
        NodeUpgrade.objects.filter(
            state=State.SKIPPED, reason=NodeUpgrade.Reason.OFFLINE, rollout__state=Rollout.State.COMPLETED
        )
        .exclude(rollout__release__expires_at__lte=now)
        .filter(Exists(Node.objects.filter(online_node_q(now=now), pk=node)), Exists(binary))
        .exclude(Exists(newer))
        .exclude(Exists(claimed))
        .exclude(Exists(not_older))
        .exclude(Exists(blocked))
    )


def rollouts_converge(*, now: datetime) -> int:
    """Upgrade the nodes of completed rollouts that come back (``convergence_candidates``), within budgets.

    Per pool, in id order, under the pool's row lock (``pool_budget(lock=True)``, as
    ``rollout_start_nodes``): two workers converging at once never exceed a budget.
    The candidates are read again under the lock. Returns the nodes started.
    """
    pool_ids = sorted(set(convergence_candidates(now=now).values_list("pool_id", flat=True).order_by()))
    started = 0
    open_now = pool_windows_open(pool_ids=pool_ids, now=now)  # maintenance windows (CONTRACT 9.1)
    for pool_id in pool_ids:
        if pool_id not in open_now:
            continue
        with transaction.atomic():
            room = pool_budget(pool_id=pool_id, lock=True).available
            if room <= 0:
                continue
            started_at = max(now, timezone.now())
            rows = list(
                convergence_candidates(now=now)
                .filter(pool_id=pool_id)
                .order_by("rollout__completed_at", "position")
                .values(
                    "id",
                    "node_id",
                    "rollout_id",
                    "target_version",
                    "node__arch",
                    "node__session__protocol_version",
                    "rollout__upgrade_timeout_seconds",
                    "rollout__release_id",
                )[:room]
            )
            started += _converge_rows(rows, started_at=started_at)
    return started


def _converge_rows(rows: Sequence[Mapping[str, Any]], *, started_at: datetime) -> int:
    """Start these candidate rows (already within the budget), per rollout."""
    releases = signed_releases(ids={row["rollout__release_id"] for row in rows})
    by_rollout: dict[UUID, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rollout[row["rollout_id"]].append(row)
    started = 0
    for rollout_id, group in by_rollout.items():
        deadline = started_at + timedelta(seconds=group[0]["rollout__upgrade_timeout_seconds"])
        moved = _converge_batch(rollout_id, group, releases=releases, started_at=started_at, deadline=deadline)
        if moved is None and len(group) > 1:
            # A new rollout took one of the nodes meanwhile: row by row, only the refused ones are left out.
            batches = ([row] for row in group)
            moved = sum(
                _converge_batch(rollout_id, batch, releases=releases, started_at=started_at, deadline=deadline) or 0
                for batch in batches
            )
        if moved:
            _timeouts_due(rollout_id=rollout_id, at=deadline)
            started += moved
    return started


def _converge_batch(
    rollout_id: UUID,
    batch: Sequence[Mapping[str, Any]],
    *,
    releases: Mapping[str, SignedRelease],
    started_at: datetime,
    deadline: datetime,
) -> int | None:
    """skipped -> in_flight for ``batch`` and their spec.daemon; None when the one-writer index refused it."""
    try:
        with transaction.atomic():
            moved = converge_upgrades(
                rollout_id=rollout_id,
                starts=[(row["id"], row["node_id"]) for row in batch],
                started_at=started_at,
                deadline=deadline,
            )
    except IntegrityError:
        return None
    if moved:
        minimum_protocol = min_protocol_version()
        sections = []
        old_agents = []
        for row in batch:
            section = releases[row["target_version"]].section(row["node__arch"])
            assert section is not None  # a candidate's release has a binary for its arch
            sections.append((row["node_id"], section))
            if (row["node__session__protocol_version"] or 0) < minimum_protocol:
                old_agents.append((row["node_id"], section))
        _send_out(sections=sections, old_agents=old_agents)
    return moved
