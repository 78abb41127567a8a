"""What the controller keeps, checked after every step of its reference model (tests/rollout/test_model.py).

The five invariants of that module's docstring, one function each, over one reading of the database
taken after the step (``Reading``) and what the model remembers (``ModelFleet``): the previous states of
rows and rollouts, who is online, the failed nodes not heard since they failed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

from hypothesis import event

from fleet.models import Node
from fleet.services.nodes import online_node_q
from rollout.models import NodeUpgrade, Rollout, RolloutWave
from tests.rollout.model_fleet import REGISTERED, ModelFleet

S = NodeUpgrade.State
SETTLED = {S.SUCCEEDED, S.FAILED, S.SKIPPED, S.CANCELLED, S.ROLLED_BACK}
LEGAL_ROW_MOVES = {
    (S.PENDING, S.IN_FLIGHT),
    (S.PENDING, S.SKIPPED),
    (S.PENDING, S.CANCELLED),
    (S.IN_FLIGHT, S.SUCCEEDED),
    (S.IN_FLIGHT, S.FAILED),
    (S.IN_FLIGHT, S.ROLLED_BACK),
}
R = Rollout.State
LEGAL_ROLLOUT_MOVES = {
    (R.ACTIVE, R.PAUSED),
    (R.PAUSED, R.ACTIVE),
    (R.ACTIVE, R.COMPLETED),
    (R.ACTIVE, R.ABORTED),
    (R.PAUSED, R.ABORTED),
}
ROW_FIELDS = (
    "id",
    "rollout_id",
    "node_id",
    "pool_id",
    "wave",
    "state",
    "claims_node",
    "started_at",
    "settled_at",
    "previous_daemon",
    "previous_version",
    "target_version",
    "reason",
)


def allowed(budget: str, nodes: int) -> int:
    """ceil(disruptionBudget x nodes), computed here independently of fleet/services/budget.py."""
    return math.ceil(Decimal(budget) * nodes)


def sent_back_version(row: dict, arch: str) -> str | None:
    """The version a failed or rolled-back row's node must be told to run again
    (docs/controller.md#pause-resume-promote-abort, rollout/controller/daemons.py ``send_back``)."""
    previous = (row["previous_daemon"] or {}).get("version")
    if previous and arch in REGISTERED.get(previous, ()):
        return previous
    if row["previous_version"] and arch in REGISTERED.get(row["previous_version"], ()):
        return row["previous_version"]
    return previous  # nothing registered: literally its previous section (possibly none)


@dataclass
class Reading:
    """The tenant's rows, rollouts, waves and node specs after one step of the model."""

    step: str
    now: datetime
    rows: list[dict]
    rollouts: dict[UUID, dict]
    waves: dict[UUID, dict[int, dict]]
    specs: dict[UUID, dict]
    by_rollout: dict[UUID, list[dict]]


def check_invariants(model: ModelFleet) -> None:
    """Every invariant after the model's last step; then the states are remembered for the next one."""
    rows = list(NodeUpgrade.objects.filter(rollout__tenant=model.tenant).values(*ROW_FIELDS))
    if not rows:  # before setup
        return
    rollouts = {
        r["id"]: r
        for r in Rollout.objects.filter(tenant=model.tenant).values("id", "state", "current_wave", "soak_seconds")
    }
    waves: dict[UUID, dict[int, dict]] = {}
    for wave in RolloutWave.objects.filter(rollout__tenant=model.tenant).values():
        waves.setdefault(wave["rollout_id"], {})[wave["index"]] = wave
    by_rollout: dict[UUID, list[dict]] = {}
    for row in rows:
        by_rollout.setdefault(row["rollout_id"], []).append(row)
    reading = Reading(
        step=model.step,
        now=model.now,
        rows=rows,
        rollouts=rollouts,
        waves=waves,
        specs=dict(Node.objects.filter(tenant=model.tenant).values_list("id", "spec")),
        by_rollout=by_rollout,
    )

    # The harness: the model's idea of who is online is the fleet's.
    online = set(Node.objects.filter(online_node_q(now=reading.now), tenant=model.tenant).values_list("id", flat=True))
    model_online = {a.node_id for a in model.agents.values() if model.online(a)}
    assert online == model_online, "harness: the model's online nodes differ from the fleet's"

    moved = legal_moves(model, reading)
    completion_only_when_settled(model, reading)
    waves_in_order(reading, moved)
    one_writer(reading)
    targets_kept(model, reading)
    budget_kept(model, reading, moved)

    model.rows = {r["id"]: r["state"] for r in rows}
    model.rollout_states = {rid: r["state"] for rid, r in rollouts.items()}


def legal_moves(model: ModelFleet, reading: Reading) -> list[tuple[dict, str]]:
    """(5) Rows and rollouts move only along the legal transitions. Returns the rows that moved (and from what)."""
    step = reading.step
    created = bool(set(reading.rollouts) - set(model.rollout_states))
    moved: list[tuple[dict, str]] = []
    for row in reading.rows:
        before = model.rows.get(row["id"])
        if before is None:
            assert row["state"] == S.PENDING, f"after {step}: a new row is {row['state']}, not pending"
            continue
        if before != row["state"]:
            finished = reading.rollouts[row["rollout_id"]]["state"] in Rollout.TERMINAL_STATES
            # A skipped node of a completed rollout converges when it comes back
            # (docs/controller.md#convergence-after-completion).
            convergence = (before, row["state"]) == (S.SKIPPED, S.IN_FLIGHT) and finished
            # A new rollout takes the in-flight nodes of a finished one (they are in no active rollout).
            superseded = (before, row["state"]) == (S.IN_FLIGHT, S.CANCELLED) and finished and created
            assert (before, row["state"]) in LEGAL_ROW_MOVES or convergence or superseded, (
                f"after {step}: node upgrade {row['id']} moved {before} -> {row['state']}"
            )
            moved.append((row, before))
            event(f"node upgrade {before} -> {row['state']}")  # --hypothesis-show-statistics: what was reached
    for rollout_id, rollout in reading.rollouts.items():
        before = model.rollout_states.get(rollout_id)
        if before is None:
            assert rollout["state"] == R.ACTIVE, f"after {step}: a new rollout is {rollout['state']}"
        elif before != rollout["state"]:
            assert (before, rollout["state"]) in LEGAL_ROLLOUT_MOVES, (
                f"after {step}: rollout moved {before} -> {rollout['state']}"
            )
            event(f"rollout {before} -> {rollout['state']}")
    return moved


def completion_only_when_settled(model: ModelFleet, reading: Reading) -> None:
    """(5) A rollout completes only when every wave has settled; an aborted one has no pending node."""
    step = reading.step
    for rollout_id, rollout in reading.rollouts.items():
        rows = reading.by_rollout.get(rollout_id, [])
        if rollout["state"] == R.COMPLETED and model.rollout_states.get(rollout_id) != R.COMPLETED:
            unsettled = [r for r in rows if r["state"] == S.PENDING]
            unsettled += [r for r in rows if r["state"] == S.IN_FLIGHT and model.rows.get(r["id"]) != S.SKIPPED]
            assert not unsettled, f"after {step}: completed with {len(unsettled)} node(s) not settled"
            assert all(w["settled_at"] is not None for w in reading.waves[rollout_id].values()), (
                f"after {step}: completed with a wave not settled"
            )
            assert rollout["current_wave"] == max(reading.waves[rollout_id]), (
                f"after {step}: completed before the last wave"
            )
        if rollout["state"] == R.ABORTED:
            assert not any(r["state"] == S.PENDING for r in rows), "an aborted rollout has pending nodes"


def waves_in_order(reading: Reading, moved: list[tuple[dict, str]]) -> None:
    """(3) No node of wave k+1 starts (or is skipped) before wave k settled and soaked; none outside an active
    rollout."""
    step = reading.step
    for row, before in moved:
        if before != S.PENDING or row["state"] not in (S.IN_FLIGHT, S.SKIPPED):
            continue
        rollout = reading.rollouts[row["rollout_id"]]
        if row["state"] == S.IN_FLIGHT:
            assert rollout["state"] == R.ACTIVE, f"after {step}: a node started in a {rollout['state']} rollout"
        earlier = [r for r in reading.by_rollout[row["rollout_id"]] if r["wave"] < row["wave"]]
        open_ = [r for r in earlier if r["state"] not in SETTLED]
        assert not open_, (
            f"after {step}: a node of wave {row['wave']} {row['state']} while {len(open_)} node(s) "
            f"of earlier waves had not settled"
        )
        previous_wave = [r for r in earlier if r["wave"] == row["wave"] - 1]
        if row["state"] == S.IN_FLIGHT and previous_wave:
            soak_end = max(r["settled_at"] for r in previous_wave) + timedelta(seconds=rollout["soak_seconds"])
            assert row["started_at"] >= soak_end, f"after {step}: wave {row['wave']} started before the soak ended"


def one_writer(reading: Reading) -> None:
    """(2) At most one claiming row and one active or paused rollout per node; ``claims_node`` exactly while the
    rollout is active or paused or the row is in flight."""
    step, rows, rollouts = reading.step, reading.rows, reading.rollouts
    claims = Counter(r["node_id"] for r in rows if r["claims_node"])
    assert max(claims.values(), default=0) <= 1, f"after {step}: a node has two claiming rows"
    holders = Counter(r["node_id"] for r in rows if rollouts[r["rollout_id"]]["state"] in Rollout.ACTIVE_STATES)
    assert max(holders.values(), default=0) <= 1, f"after {step}: a node is in two active or paused rollouts"
    for row in rows:
        should = rollouts[row["rollout_id"]]["state"] in Rollout.ACTIVE_STATES or row["state"] == S.IN_FLIGHT
        assert row["claims_node"] == should, (
            f"after {step}: a {row['state']} row of a {rollouts[row['rollout_id']]['state']} rollout has "
            f"claims_node={row['claims_node']}"
        )


def targets_kept(model: ModelFleet, reading: Reading) -> None:
    """(4) Succeeded nodes keep the target; failed and rolled-back ones were sent back (latest started row rules)."""
    latest: dict[UUID, dict] = {}
    for row in sorted((r for r in reading.rows if r["started_at"]), key=lambda r: (r["started_at"], r["id"])):
        latest[row["node_id"]] = row
    for node_id, row in latest.items():
        version = ((reading.specs[node_id] or {}).get("daemon") or {}).get("version")
        if row["state"] in (S.IN_FLIGHT, S.SUCCEEDED):
            assert version == row["target_version"], (
                f"after {reading.step}: a {row['state']} node's spec.daemon is {version}, not its target"
            )
        elif row["state"] in (S.FAILED, S.ROLLED_BACK):
            expected = sent_back_version(row, model.agents[node_id].arch)
            assert version == expected, f"after {reading.step}: a {row['state']} node is told {version}, not {expected}"


def budget_kept(model: ModelFleet, reading: Reading, moved: list[tuple[dict, str]]) -> None:
    """(1) Per pool, disrupted nodes never exceed ceil(disruptionBudget x nodes), with the definition of
    disrupted (docs/controller.md#budget) computed here."""
    for row, _ in moved:
        if row["state"] == S.FAILED and not model.online(model.agents[row["node_id"]]):
            model.failed_down.add(row["node_id"])
    in_flight = {r["node_id"] for r in reading.rows if r["state"] == S.IN_FLIGHT}
    workflows = {node_id for node_id, _ in model.workflows.values()}
    for budget, nodes in model.pools.values():
        disrupted = {n for n in nodes if n in workflows or n in in_flight or n in model.failed_down}
        limit = allowed(budget, len(nodes))
        assert len(disrupted) <= limit, (
            f"after {reading.step}: pool with budget {budget} x {len(nodes)} nodes has {len(disrupted)} disrupted "
            f"(allowed {limit}): {len(disrupted & workflows)} with a workflow, "
            f"{len(disrupted & in_flight)} in flight, "
            f"{len(disrupted & model.failed_down)} failed and not online since (docs/controller.md#budget)"
        )
