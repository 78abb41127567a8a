"""Why not yet is what the next tick does: blockers against the tick, over random fleets (docs/controller.md#the-plan).

Hypothesis draws a fleet (pools with budgets 0 to 1 and maintenance windows open, closed or
absent; nodes of two archs whose agents are up, silent, gone or never joined; workflows) and a
rollout in the middle of its life (waves, the current one moving with pending, in-flight and
settled rows, or settled (recorded by a tick or not yet) and soaking or done soaking; failed
nodes back or not; active or paused; or held: awaiting approval, scheduled ahead or due, a gate
holding or passing, its release expired or blocked in the tenant, its deadline passed, a failure
in its wave over a ratio of 0), writes it, reads every row's blocker and the rollout's, runs one
tick at the same instant, and checks:

1. the rows whose blocker is ``next_tick`` are exactly the rows the tick started, plus the rows
   it skipped for want of a binary (the table has no code of its own for those: the next tick
   settles them, so ``next_tick``);
2. the rows it skipped as offline said ``offline``;
3. every pending row the tick left pending carries the blocker the tick's plan gave it: the
   plan's decision for the rows it reached, ``outside_window`` in its closed pools,
   ``budget_full`` (or ``offline``, first in the table) behind the rows that took the free
   slots, and the rollout's own reason (paused, wave not started, soaking) for the others;
4. a single row asked alone says what it says in its page;
5. the rollout's own blocker is null when the tick starts or skips a node (its nodes move).

The tick's settle step is kept out of the way (no agent on its target, deadlines ahead), and its
judge but where the hold is ``failure_ratio``: what is checked is the judge, the start step and the
wave's advance.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import pytest
import time_machine
from django.db import transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fleet.models import FleetPulse, Node, NodeSession, Pool, Workflow
from fleet.tokens import new_token, token_hash
from rollout.controller.decisions import Move
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade, Release, ReleaseBlock, Rollout, RolloutGate, RolloutWave
from rollout.rollouts.blockers import node_blockers, rollout_blockers

pytestmark = pytest.mark.django_db

NOW = datetime(2031, 3, 5, 12, 0, tzinfo=UTC)  # a Wednesday, noon UTC
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WINDOWS = {
    "none": [],
    "open": [{"days": DAYS, "start": "11:00", "durationMinutes": 120, "timezone": "UTC"}],
    "closed": [{"days": DAYS, "start": "20:00", "durationMinutes": 60, "timezone": "UTC"}],
}
# What an agent does: heartbeating, silent past the online window, gone (left), or it never joined.
AGENTS = ("up", "up", "up", "up", "silent", "left", "never")
# What else holds the rollout (mostly nothing): see ``build``.
HOLDS = ("none",) * 8 + (
    "approval",
    "scheduled",
    "scheduled_due",
    "gate",
    "gate_passing",
    "expired",
    "blocked",
    "deadline_pause",
    "deadline_abort",
    "failure_ratio",
)
S = NodeUpgrade.State


@dataclass(frozen=True)
class NodeSpec:
    arch: str
    agent: str
    workflow: bool
    # The row's state when its wave is the current one (other waves: settled before it, pending after it).
    state: str


@dataclass(frozen=True)
class Scenario:
    pools: list[tuple[str, str, list[NodeSpec]]]  # (budget, windows, nodes)
    order: list[int]  # position -> node index (over all pools' nodes)
    waves: int
    current: int
    #: The current wave settled (its moving rows drawn as succeeded); then it soaks, or its soak is over.
    wave_done: bool
    soak_over: bool
    paused: bool
    trusted: bool
    hold: str = "none"
    #: The current wave's last node settled after the last tick: no tick recorded it yet (the next one does).
    unrecorded: bool = False


NODES = st.builds(
    NodeSpec,
    arch=st.sampled_from(["amd64", "amd64", "arm64"]),  # 1.0.0 has no arm64 binary
    agent=st.sampled_from(AGENTS),
    workflow=st.sampled_from([False, False, False, True]),
    state=st.sampled_from([S.PENDING] * 4 + [S.IN_FLIGHT, S.SUCCEEDED, S.FAILED, S.SKIPPED]),
)


@st.composite
def scenarios(draw) -> Scenario:
    pools = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["0", "0.2", "0.34", "0.5", "1"]),
                st.sampled_from(["none", "none", "open", "open", "closed"]),
                st.lists(NODES, min_size=1, max_size=10),
            ),
            min_size=1,
            max_size=3,
        )
    )
    size = sum(len(nodes) for _, _, nodes in pools)
    waves = min(draw(st.sampled_from([1, 1, 2, 3])), size)
    return Scenario(
        pools=pools,
        order=draw(st.permutations(range(size))),
        waves=waves,
        current=draw(st.integers(0, waves - 1)),
        wave_done=draw(st.integers(0, 3)) == 0,
        soak_over=draw(st.booleans()),
        paused=draw(st.integers(0, 9)) == 0,
        trusted=draw(st.integers(0, 5)) != 0,
        hold=draw(st.sampled_from(HOLDS)),
        unrecorded=draw(st.booleans()),
    )


def _session(node: Node, agent: str) -> NodeSession | None:
    seen = {"up": NOW - timedelta(seconds=5), "silent": NOW - timedelta(minutes=2), "left": NOW - timedelta(minutes=1)}
    if agent == "never":
        return None
    return NodeSession(
        node=node,
        daemon_version="0.9.0",
        protocol_version=3,
        joined_at=NOW - timedelta(hours=1),
        last_seen_at=seen[agent],
        left_at=NOW - timedelta(minutes=1) if agent == "left" else None,
    )


def build(scenario: Scenario, tenant, release: Release) -> Rollout:
    """Write the scenario's fleet and rollout (rows straight in the tables, as a run of the controller leaves them)."""
    FleetPulse.objects.update_or_create(
        pk=1,
        defaults={
            "last_heard_at": NOW,
            "listening_since": NOW - (timedelta(hours=1) if scenario.trusted else timedelta(seconds=5)),
        },
    )
    nodes: list[tuple[Node, NodeSpec]] = []
    for index, (budget, windows, specs) in enumerate(scenario.pools):
        pool = Pool.objects.create(
            id=UUID(int=index + 1),
            tenant=tenant,
            name=f"p{index}",
            disruption_budget=Decimal(budget),
            maintenance_windows=WINDOWS[windows],
        )
        created = Node.objects.bulk_create(
            Node(
                id=UUID(int=1000 * (index + 1) + n),
                tenant=tenant,
                pool=pool,
                name=f"p{index}-{n}",
                arch=spec.arch,
                agent_token_hash=token_hash(new_token("at")),
            )
            for n, spec in enumerate(specs)
        )
        nodes += zip(created, specs, strict=True)
    NodeSession.objects.bulk_create(filter(None, (_session(node, spec.agent) for node, spec in nodes)))
    Workflow.objects.bulk_create(
        Workflow(tenant=tenant, node=node, pool=node.pool, kind="maintenance", started_at=NOW - timedelta(minutes=5))
        for node, spec in nodes
        if spec.workflow
    )
    size = len(nodes)
    wave_of = [position * scenario.waves // size for position in range(size)]
    current = scenario.current
    rows = []
    for position, node_index in enumerate(scenario.order):
        node, spec = nodes[node_index]
        wave = wave_of[position]
        state = S.SUCCEEDED if wave < current else S.PENDING if wave > current else spec.state
        if wave == current and scenario.wave_done and state in (S.PENDING, S.IN_FLIGHT):
            state = S.SUCCEEDED
        row = NodeUpgrade(node=node, pool=node.pool, wave=wave, position=position, state=state, target_version="1.0.0")
        if state in (S.IN_FLIGHT, S.SUCCEEDED, S.FAILED):
            row.started_at, row.deadline = NOW - timedelta(minutes=20), NOW + timedelta(minutes=10)
        if state in (S.SUCCEEDED, S.FAILED, S.SKIPPED):
            # 90 s ago: an agent silent for 2 minutes has not been back since it failed (it still holds a slot).
            # A wave no tick recorded yet soaks from its last node's settle: over when that is 10 minutes ago.
            long_ago = wave < current or (scenario.unrecorded and scenario.soak_over)
            row.settled_at = NOW - (timedelta(minutes=10) if long_ago else timedelta(seconds=90))
            row.reason = {S.FAILED: "timeout", S.SKIPPED: "offline"}.get(state)
        rows.append(row)
    moving = any(row.wave == current and row.state in (S.PENDING, S.IN_FLIGHT) for row in rows)
    recorded = not moving and not scenario.unrecorded
    settled_at = NOW - timedelta(minutes=10) if recorded else None  # recorded by the tick that saw it settle
    hold = scenario.hold
    state = Rollout.State.PAUSED if scenario.paused else Rollout.State.ACTIVE
    if hold == "approval" and not scenario.paused:
        state = Rollout.State.AWAITING_APPROVAL
    elif hold in ("scheduled", "scheduled_due") and not scenario.paused:
        state = Rollout.State.SCHEDULED
    if hold == "expired":
        Release.objects.filter(pk=release.pk).update(expires_at=NOW - timedelta(minutes=1))
    elif hold == "blocked":
        ReleaseBlock.objects.create(tenant=tenant, release=release, reason="bad", at=NOW - timedelta(minutes=1))
    rollout = Rollout.objects.create(
        tenant=tenant,
        release=release,
        approvals_required=1 if state == Rollout.State.AWAITING_APPROVAL else 0,
        start_at=NOW + timedelta(hours=1 if hold == "scheduled" else -1) if hold.startswith("scheduled") else None,
        end_by=NOW - timedelta(minutes=1) if hold.startswith("deadline") else None,
        end_behavior={"deadline_pause": "pause", "deadline_abort": "abort"}.get(hold),
        waves=[100 * (k + 1) // scenario.waves for k in range(scenario.waves)],
        max_failure_ratio=0 if hold == "failure_ratio" else 1,  # then one failure in its wave pauses it
        soak_seconds=300,
        upgrade_timeout_seconds=1800,
        state=state,
        paused_reason=Rollout.PausedReason.OPERATOR if scenario.paused else None,
        current_wave=current,
        next_wave_at=NOW + timedelta(minutes=1 if not scenario.soak_over else -1) if recorded else None,
        created_at=NOW - timedelta(hours=1),
        last_tick_at=NOW - timedelta(seconds=5),  # a controller runs (no_controller is tested in test_health.py)
    )
    rollout.pools.set([pool_id for pool_id in {node.pool_id for node, _ in nodes}])
    RolloutWave.objects.bulk_create(
        RolloutWave(
            rollout=rollout,
            index=k,
            percent=rollout.waves[k],
            total=wave_of.count(k),
            started_at=NOW - timedelta(minutes=30) if k <= current else None,
            settled_at=NOW - timedelta(minutes=10) if k < current else settled_at if k == current else None,
        )
        for k in range(scenario.waves)
    )
    for row in rows:
        row.rollout = rollout
    NodeUpgrade.objects.bulk_create(rows)
    if hold.startswith("gate"):  # a gate that has not answered yet holds; a pass taken a second ago does not
        fresh = NOW + timedelta(seconds=59) if hold == "gate_passing" else None
        state = RolloutGate.State.PASS if fresh else RolloutGate.State.PENDING
        RolloutGate.objects.create(
            rollout=rollout,
            position=0,
            name="g",
            kind="http",
            url="https://x",
            state=state,
            fresh_until=fresh,
            due_at=NOW,
        )
    return rollout


def offline(node_id: UUID) -> bool:
    session = NodeSession.objects.filter(node_id=node_id).first()
    return session is None or session.left_at is not None or session.last_seen_at < NOW - timedelta(seconds=30)


def check(scenario: Scenario, tenant, release: Release) -> None:
    rollout = build(scenario, tenant, release)
    rows = list(NodeUpgrade.objects.filter(rollout=rollout).select_related("rollout").order_by("position"))
    blockers = node_blockers(rows, now=NOW)
    code = {row.id: blocker.code if blocker else None for row, blocker in ((r, blockers[r.id]) for r in rows)}
    pending = [row for row in rows if row.state == S.PENDING]
    for row in pending[:3]:  # 4. alone as in its page
        assert node_blockers([row], now=NOW)[row.id] == blockers[row.id]

    soaking = rollout_soaks(rollout)  # before the tick: a wave it settles soaks only from then on
    moving = any(row.wave == rollout.current_wave and row.state in (S.PENDING, S.IN_FLIGHT) for row in rows)
    held = rollout_blockers([rollout], now=NOW)[rollout.id]
    result = rollout_tick(rollout_id=rollout.id)
    assert result is not None
    after = dict(NodeUpgrade.objects.filter(rollout=rollout).values_list("id", "state"))
    judged = Rollout.objects.get(pk=rollout.pk).paused_reason == Rollout.PausedReason.FAILURE_RATIO
    # A wave that had settled but that no tick had recorded soaks from its last node's settle: the tick recorded
    # it, and the blockers saw it so before.
    soaking = soaking or (not moving and rollout_soaks(Rollout.objects.get(pk=rollout.pk)))
    reasons = dict(NodeUpgrade.objects.filter(rollout=rollout).values_list("id", "reason"))
    started = {row.id for row in pending if after[row.id] == S.IN_FLIGHT}
    skipped = {row.id: reasons[row.id] for row in pending if after[row.id] == S.SKIPPED}

    # 1 and 2: what the blockers promised, the tick did.
    next_tick = {row.id for row in pending if code[row.id] == "next_tick"}
    no_binary = {pk for pk, reason in skipped.items() if reason == NodeUpgrade.Reason.NO_BINARY}
    assert next_tick == started | no_binary, (code, after)
    assert all(code[pk] == "offline" for pk, reason in skipped.items() if reason == NodeUpgrade.Reason.OFFLINE)
    # 5: a rollout whose nodes move holds nothing as a whole.
    assert held is None or not (started or skipped), (held, started, skipped)

    # 3: what the tick left pending says why, as its plan says.
    plan = result.plan
    # The wave its start step took (a gate holds it: none, and the wave is the one it stands on after the tick).
    start_wave = plan.wave if plan is not None else Rollout.objects.get(pk=rollout.pk).current_wave
    decided = plan.decided() if plan is not None else {}
    # A gate holds the current wave's rows and those of the wave that starts next: the plan's, or during a soak
    # the one that starts when it ends (docs/controller.md#why-not-yet: right after rollout_paused).
    gated = {rollout.current_wave, plan.wave if plan is not None else -1, rollout.current_wave + 1 if soaking else -1}
    for row in pending:
        if after[row.id] != S.PENDING:
            continue
        hold = scenario.hold
        if hold == "approval" and not scenario.paused:
            expected = {"awaiting_approval"}
        elif scenario.paused or hold in ("expired", "blocked", "deadline_pause") or judged:
            expected = {"rollout_paused"}
        elif hold == "scheduled":
            expected = {"scheduled"}
        elif hold == "gate" and row.wave in gated | {start_wave}:
            expected = {"gate"}
        elif plan is None or row.wave != plan.wave:
            expected = {"soaking"} if soaking else {"wave_not_started"}
        elif row.pool_id in plan.closed:
            expected = {"outside_window"}
        elif row.id in decided:
            assert decided[row.id].move == Move.WAIT
            expected = {decided[row.id].code}
        else:  # the tick did not reach it: the free slots went to the rows ahead of it
            expected = {"offline"} if offline(row.node_id) else {"budget_full"}
        assert code[row.id] in expected, (row.wave, row.position, code[row.id], expected)


def rollout_soaks(rollout: Rollout) -> bool:
    """Its current wave settled and soaks (the scenario records next_wave_at only then); a scheduled rollout whose
    startAt has come soaks too: the tick starts it before it advances."""
    running = rollout.state == Rollout.State.ACTIVE or (
        rollout.state == Rollout.State.SCHEDULED and rollout.start_at is not None and rollout.start_at <= NOW
    )
    return running and rollout.next_wave_at is not None and rollout.next_wave_at > NOW


def _turns(*, trusted: bool, hold: str = "none") -> Scenario:
    """One pool, 2 free slots: a node without a binary, an offline one, then three that could start."""
    nodes = [
        NodeSpec("arm64", "up", workflow=False, state=S.PENDING),  # skipped: no binary, takes no slot
        NodeSpec("amd64", "silent", workflow=False, state=S.PENDING),  # offline: skipped (or waited for)
        NodeSpec("amd64", "up", workflow=False, state=S.PENDING),
        NodeSpec("amd64", "up", workflow=False, state=S.PENDING),
        NodeSpec("amd64", "up", workflow=False, state=S.PENDING),  # behind the free slots: budget_full
        NodeSpec("amd64", "up", workflow=True, state=S.SUCCEEDED),  # its workflow takes a slot
    ]
    return Scenario([("0.5", "none", nodes)], [0, 1, 2, 3, 4, 5], 1, 0, False, False, False, trusted, hold)


def test_the_blockers_say_what_the_next_tick_does(tenant, releases):
    _, release = releases

    def one_fleet(scenario: Scenario) -> None:
        # One savepoint per example: every example starts from the same database.
        with time_machine.travel(NOW, tick=False), transaction.atomic():
            check(scenario, tenant, release)
            transaction.set_rollback(True)

    test = given(scenario=scenarios())(one_fleet)
    # Started early, paused while its first wave soaked, resumed before its startAt (back to scheduled): when the
    # startAt comes during the soak, the tick starts it and it soaks; the next wave waits.
    up = [NodeSpec("amd64", "up", workflow=False, state=S.PENDING)] * 3
    test = example(scenario=Scenario([("1", "none", up)], [0, 1, 2], 2, 0, True, False, False, True, "scheduled_due"))(
        test
    )
    # Its first wave settled after the last tick, and its soak counted from then is over: the tick records the
    # settle and starts the next wave at once, and the blockers say so (next_tick, not wave_not_started).
    unrecorded = Scenario([("1", "none", up)], [0, 1, 2], 2, 0, True, True, False, True, unrecorded=True)
    test = example(scenario=unrecorded)(example(scenario=replace(unrecorded, soak_over=False))(test))
    # A failure in its wave over a ratio of 0: the next tick pauses it, and the blockers say so.
    failing = [NodeSpec("amd64", "up", workflow=False, state=S.FAILED), *up]
    test = example(
        scenario=Scenario([("1", "none", failing)], [0, 1, 2, 3], 1, 0, False, False, False, True, "failure_ratio")
    )(test)
    # Each hold at least once on a pool where nodes would start (the draws reach them rarely).
    for scenario in [_turns(trusted=False), *(_turns(trusted=True, hold=hold) for hold in dict.fromkeys(HOLDS))]:
        test = example(scenario=scenario)(test)
    settings(
        max_examples=80,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )(test)()
    assert not Rollout.objects.exists()
