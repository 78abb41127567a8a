"""The controller against a small reference model (CONTRACT 5): random interleavings, invariants after every step.

A hypothesis ``RuleBasedStateMachine`` drives a small fleet (2 pools of 4 to 6
nodes, budgets 0.25 to 0.5, releases 0.9.0 -> 1.0.0) through the real services:
ticks, agents upgrading (leave, rejoin on ``spec.daemon``: the join hook settles),
agents failing, leaving, hanging and coming back, heartbeats, time passing and
deadlines running out (tick, ``rollout/all``, ``rollout/timeouts-due``,
``rollout/node-upgrade-timeout``), pause, resume, abort (with and without
rollback), workflows, and new rollouts once the nodes are free.

The model keeps what the database cannot be trusted to say about itself: each
agent's state (up, hung, down; the version it runs; when it last reported), the
workflows it started, which failed nodes have not been online since they failed,
and every row's previous state. After every step it checks:

1. budget: per pool, disrupted nodes (active workflow, upgrade in flight in any
   rollout, or a failed upgrade whose node has not been online since it failed)
   never exceed ceil(disruptionBudget x nodes);
2. one writer: at most one claiming row per node, at most one active or paused
   rollout per node, and ``claims_node`` exactly while the rollout is active or
   paused or the row is in flight;
3. waves in order: no node of wave k+1 starts (or is skipped) before every node of
   wave k has settled and the soak has passed; nothing starts in a rollout that
   is not active;
4. a succeeded row's node keeps ``spec.daemon`` at the target; failed and
   rolled-back rows' nodes were sent back to what they ran;
5. rows and rollouts move only along the legal transitions; a rollout completes
   only when all its waves have settled.

Two readings are lenient on purpose, so the model never asks more than the
contract. "Not online since it failed" is judged as a lower bound every reading of
the contract agrees on: the node was offline when it failed and its agent has not
reported since. A node that failed while heartbeating on its old version is not
counted. And a timeout must fail an overdue node only once the server has heard
the fleet for a whole online window (liveness is judged against the fleet).
Creating a rollout is refused exactly while a node is in an active or paused
rollout (4.4): the in-flight nodes of an aborted one may be taken over (the old
row then goes in_flight -> cancelled).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import pytest
import time_machine
from django.db import transaction
from django.test import TestCase
from django.utils import timezone
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from core.errors import Conflict, InvalidState
from fleet.models import Node, NodeSession, Pool, Workflow
from fleet.services.iam import tenant_create
from fleet.services.nodes import nodes_set_daemon, online_node_q
from fleet.services.sessions import agent_session_leave, agent_session_report
from fleet.services.workflows import workflow_finish, workflow_start
from fleet.tokens import new_token, token_hash
from rollout import tasks
from rollout.models import NodeUpgrade, Rollout, RolloutWave
from rollout.services.controller import rollout_tick, rollouts_tick_all
from rollout.services.create import rollout_create
from rollout.services.daemons import registered_daemon_section
from rollout.services.plan import rollout_spec
from rollout.services.rollouts import rollout_abort, rollout_pause, rollout_resume
from tests.factories import fleet
from tests.rollout.helpers import in_flight, tick

pytestmark = pytest.mark.django_db

START = datetime(2031, 3, 3, 12, 0, tzinfo=UTC)
HEARTBEAT_SECONDS = 10  # FLEET_HEARTBEAT_SECONDS in tests/rollout/conftest.py
ONLINE_WINDOW = timedelta(seconds=3 * HEARTBEAT_SECONDS)
PROTOCOL = 3
OLD, NEW, UNREGISTERED = "0.9.0", "1.0.0", "0.8.0"
# What the `releases` fixture registers: version -> archs it has a binary for.
REGISTERED = {OLD: {"amd64", "arm64"}, NEW: {"amd64"}}

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

WAVES = st.sampled_from([(100,), (50, 100), (25, 50, 100), (34, 67, 100)])
RATIOS = st.sampled_from([0, 0.5, 1])
SOAKS = st.sampled_from([0, 30])
TIMEOUTS = st.sampled_from([60, 120])
BUDGETS = st.sampled_from(["0.25", "0.34", "0.5"])
PICK = st.integers(min_value=0, max_value=63)
# What an agent told to run another version does (weighted towards success).
OUTCOMES = st.sampled_from(["upgrade", "upgrade", "upgrade", "never_back", "old_version", "slow"])
SEEDS = st.integers(min_value=1, max_value=2**64)

# The id the next rollout gets. The shuffle is seeded by the rollout id: an example drawn by hypothesis
# must replay with the same id (and the same node ids) to replay the same waves.
_next_rollout_id: list[UUID] = []


def _rollout_id() -> UUID:
    return _next_rollout_id.pop()


@dataclass
class Agent:
    node_id: UUID
    pool_id: UUID
    arch: str
    running: str
    status: str  # "up" (heartbeating), "hung" (session open, silent), "down" (left)
    last_report: datetime


def allowed(budget: str, nodes: int) -> int:
    """ceil(disruptionBudget x nodes), computed here independently of fleet/services/budget.py."""
    return math.ceil(Decimal(budget) * nodes)


def sent_back_version(row: dict, arch: str) -> str | None:
    """The version a failed or rolled-back row's node must be told to run again (CONTRACT 5, daemons.py)."""
    previous = (row["previous_daemon"] or {}).get("version")
    if previous and arch in REGISTERED.get(previous, ()):
        return previous
    if row["previous_version"] and arch in REGISTERED.get(row["previous_version"], ()):
        return row["previous_version"]
    return previous  # nothing registered: literally its previous section (possibly none)


class ControllerModel(RuleBasedStateMachine):
    tenant_index = 0

    def __init__(self) -> None:
        super().__init__()
        # One savepoint per example inside the test's transaction: every example starts from the same database.
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        self.clock = time_machine.travel(START, tick=False)
        self.traveller = self.clock.start()
        ControllerModel.tenant_index += 1
        self.tenant = tenant_create(slug=f"model-{ControllerModel.tenant_index}")
        self.agents: dict[UUID, Agent] = {}
        self.pools: dict[UUID, tuple[str, list[UUID]]] = {}  # pool -> (budget, nodes)
        self.rollouts: list[UUID] = []
        self.workflows: dict[UUID, tuple[UUID, str]] = {}  # active workflows: id -> (node, kind)
        self.finished_workflows: list[UUID] = []
        self.failed_down: set[UUID] = set()  # failed while offline, agent silent since
        self.heard_since: datetime | None = START  # the fleet's sessions are created heartbeating
        self.last_heard: datetime | None = START
        self.rows: dict[int, str] = {}  # node upgrade id -> state after the previous step
        self.rollout_states: dict[UUID, str] = {}
        self.step = "init"

    def teardown(self) -> None:
        self.clock.stop()
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)

    # --- helpers -----------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return timezone.now()

    def online(self, agent: Agent) -> bool:
        return agent.status != "down" and self.now - agent.last_report <= ONLINE_WINDOW

    def pick(self, items: list, i: int):
        return items[i % len(items)] if items else None

    def agents_where(self, *statuses: str) -> list[Agent]:
        return [a for a in self.agents.values() if a.status in statuses]

    def spec_versions(self) -> dict[UUID, str | None]:
        specs = Node.objects.filter(tenant=self.tenant).values_list("id", "spec")
        return {node_id: ((spec or {}).get("daemon") or {}).get("version") for node_id, spec in specs}

    def report(self, agent: Agent, version: str) -> None:
        """A join or heartbeat through the fleet's real path; the join hook runs as a commit would run it."""
        node = Node.objects.select_related("session").get(pk=agent.node_id)
        with TestCase.captureOnCommitCallbacks() as hooks:
            joined = agent_session_report(
                node=node, daemon_version=version, protocol_version=PROTOCOL, now=self.now
            ).joined
        with TestCase.captureOnCommitCallbacks():  # the ticks the hook asks for: this model ticks by itself
            for hook in hooks:
                hook()
        if self.last_heard is None or self.now - self.last_heard > timedelta(seconds=1.5 * HEARTBEAT_SECONDS):
            self.heard_since = self.now  # the fleet was silent: the server listens again from now
        self.last_heard = self.now
        # A plain heartbeat writes last_seen_at only once it is an interval old (coalesced writes, CONTRACT 8):
        # the fleet's online state is exact to one interval, and the model follows the same rule.
        written = joined or self.now - agent.last_report >= timedelta(seconds=HEARTBEAT_SECONDS)
        agent.running, agent.status = version, "up"
        if written:
            agent.last_report = self.now
        self.failed_down.discard(agent.node_id)
        # The join hook's promise (its errors are only logged, so check the outcome): a node that rejoins
        # on its target is no longer in flight. A heartbeat is no join: the next tick settles that one.
        stuck = NodeUpgrade.objects.filter(node_id=agent.node_id, state=S.IN_FLIGHT, target_version=version)
        assert not (joined and stuck.exists()), f"{agent.node_id} rejoined on {version}, its target, and is in flight"

    def leave(self, agent: Agent) -> None:
        agent_session_leave(node=Node.objects.get(pk=agent.node_id), now=self.now)
        agent.status = "down"

    def advance(self, seconds: float) -> None:
        """Time passes; agents that are up heartbeat every period on the way (hung and down ones do not).

        One of them through the real path each period (so the server hears the fleet, CONTRACT 5: liveness is
        judged against the fleet), the others in one UPDATE (a heartbeat changes nothing else).
        """
        while seconds > 0:
            self.traveller.shift(timedelta(seconds=min(HEARTBEAT_SECONDS, seconds)))
            seconds -= HEARTBEAT_SECONDS
            up = self.agents_where("up")
            if not up:
                continue
            NodeSession.objects.filter(node_id__in=[a.node_id for a in up[1:]]).update(last_seen_at=self.now)
            for agent in up[1:]:
                agent.last_report = self.now
                self.failed_down.discard(agent.node_id)
            self.report(up[0], up[0].running)

    def fleet_heard(self) -> bool:
        """The server has heard the fleet without a silence for a whole online window: its offline verdicts hold."""
        return self.heard_since is not None and self.now - self.heard_since >= ONLINE_WINDOW

    def claimed_nodes(self) -> set[UUID]:
        """Nodes a new rollout may not take (CONTRACT 4.4): those in an active or paused rollout.

        In-flight nodes of an aborted rollout are in no active rollout: a fix-forward takes them.
        """
        active = {rid for rid, state in self.rollout_states.items() if state in Rollout.ACTIVE_STATES}
        return set(NodeUpgrade.objects.filter(rollout_id__in=active).values_list("node_id", flat=True))

    def create(self, *, waves, ratio, soak, timeout, seed) -> None:
        _next_rollout_id[:] = [UUID(int=seed)]
        claimed = self.claimed_nodes()
        spec = rollout_spec(
            version=NEW,
            waves=list(waves),
            max_failure_ratio=ratio,
            soak_seconds=soak,
            upgrade_timeout_seconds=timeout,
        )
        refused: Conflict | None = None
        try:
            rollout = rollout_create(tenant=self.tenant, spec=spec)
        except Conflict as exc:
            refused = exc
        _next_rollout_id.clear()
        if refused is not None:
            assert claimed, f"create refused ({refused.code}) though no node is in an active or paused rollout (4.4)"
            assert {UUID(n) for n in refused.extra["nodeIds"]} == claimed, "the conflict names other nodes"
            return
        assert not claimed, f"create took nodes {sorted(map(str, claimed))} that another rollout holds"
        self.rollouts.append(rollout.id)

    # --- setup ---------------------------------------------------------------------------

    @initialize(
        sizes=st.tuples(st.integers(4, 6), st.integers(4, 6)),
        budgets=st.tuples(BUDGETS, BUDGETS),
        odd=st.sampled_from(["none", "arm64", "unregistered"]),
        waves=WAVES,
        ratio=RATIOS,
        soak=SOAKS,
        timeout=TIMEOUTS,
        seed=SEEDS,
    )
    def setup(self, sizes, budgets, odd, waves, ratio, soak, timeout, seed) -> None:
        for index, (size, budget) in enumerate(zip(sizes, budgets, strict=True)):
            pool = Pool.objects.create(
                id=UUID(int=index + 1), tenant=self.tenant, name=f"p{index}", disruption_budget=Decimal(budget)
            )
            nodes = Node.objects.bulk_create(
                # Fixed ids: the shuffle sorts node ids, so an example must replay with the same ones.
                Node(
                    id=UUID(int=1000 * (index + 1) + n),
                    tenant=self.tenant,
                    pool=pool,
                    name=f"p{index}-{n}",
                    arch="amd64",
                    agent_token_hash=token_hash(new_token("at")),
                )
                for n in range(size)
            )
            NodeSession.objects.bulk_create(
                NodeSession(
                    node=node, daemon_version=OLD, protocol_version=PROTOCOL, joined_at=self.now, last_seen_at=self.now
                )
                for node in nodes
            )
            self.pools[pool.id] = (budget, [node.id for node in nodes])
            for node in nodes:
                self.agents[node.id] = Agent(node.id, pool.id, "amd64", OLD, "up", self.now)
        nodes_set_daemon(node_ids=list(self.agents), daemon=registered_daemon_section(version=OLD, arch="amd64"))
        odd_node = next(iter(self.agents))
        if odd == "arm64":  # the new release has no arm64 binary: skipped (no_binary)
            Node.objects.filter(pk=odd_node).update(arch="arm64")
            nodes_set_daemon(node_ids=[odd_node], daemon=registered_daemon_section(version=OLD, arch="arm64"))
            self.agents[odd_node].arch = "arm64"
        elif odd == "unregistered":  # runs a release nobody registered, no desired daemon: rollback cannot help it
            NodeSession.objects.filter(node_id=odd_node).update(daemon_version=UNREGISTERED)
            nodes_set_daemon(node_ids=[odd_node], daemon=None)
            self.agents[odd_node].running = UNREGISTERED
        self.create(waves=waves, ratio=ratio, soak=soak, timeout=timeout, seed=seed)
        assert self.rollouts, "the first rollout of a fresh fleet was refused"

    # --- the controller ------------------------------------------------------------------

    @rule(i=PICK)
    def tick(self, i) -> None:
        self.step = "tick"
        rollout_tick(rollout_id=self.pick(self.rollouts, i))

    @rule()
    def tick_all(self) -> None:
        self.step = "tick_all"
        rollouts_tick_all()

    @rule(seconds=st.integers(1, 45))
    def wait(self, seconds) -> None:
        self.step = f"wait {seconds}s"
        self.advance(seconds)

    @rule(i=PICK, how=st.sampled_from(["tick", "tick_all", "timeouts_due", "node_timeout"]))
    def time_out(self, i, how) -> None:
        """Move past an in-flight node's deadline, then let one of the paths that settle overdue nodes run."""
        rows = list(
            NodeUpgrade.objects.filter(rollout__tenant=self.tenant, state=S.IN_FLIGHT)
            .order_by("id")
            .values("id", "rollout_id", "deadline")
        )
        row = self.pick(rows, i)
        if row is None:
            return
        self.step = f"time_out via {how}"
        if row["deadline"] >= self.now:
            self.advance((row["deadline"] - self.now).total_seconds() + 1)
        if how == "tick":
            rollout_tick(rollout_id=row["rollout_id"])
        elif how == "tick_all":
            rollouts_tick_all()
        elif how == "timeouts_due":
            tasks.rollout_timeouts_due(str(row["rollout_id"]))
        else:
            tasks.node_upgrade_timeout(row["id"])
        # While the server has not heard the fleet for a whole window, offline verdicts are not trusted
        # (CONTRACT 5, liveness): an overdue node that looks offline may then wait.
        assert not (self.fleet_heard() and NodeUpgrade.objects.filter(pk=row["id"], state=S.IN_FLIGHT).exists()), (
            f"{how} left an overdue node in flight"
        )

    # --- agents --------------------------------------------------------------------------

    @rule(i=PICK)
    def upgrade(self, i) -> None:
        """An agent follows spec.daemon: it leaves, restarts into that version and rejoins on it."""
        specs = self.spec_versions()
        agent = self.pick([a for a in self.agents.values() if specs[a.node_id] not in (None, a.running)], i)
        if agent is None:
            return
        self.step = f"upgrade {agent.node_id} to {specs[agent.node_id]}"
        if agent.status != "down":
            self.leave(agent)
        self.report(agent, specs[agent.node_id])

    @rule(rounds=st.integers(1, 4), outcomes=st.lists(OUTCOMES, min_size=1, max_size=12))
    def progress(self, rounds, outcomes) -> None:
        """The world runs for a while: ticks, agents acting on what they are told, time passing.

        Invariants are checked after each round too: a round must not hide a transient violation.
        """
        for n in range(rounds):
            self.step = f"progress round {n}: tick_all"
            rollouts_tick_all()
            self.model_invariants()
            self.agents_follow(outcomes[n::rounds] or outcomes)
            self.model_invariants()
            self.step = f"progress round {n}: wait 10s"
            self.advance(10)
            self.model_invariants()

    @rule(outcomes=st.lists(OUTCOMES, max_size=6))
    def agents_follow(self, outcomes) -> None:
        """Every agent told to run another version acts at once, each with its own outcome (in node order)."""
        specs = self.spec_versions()
        told = [a for a in self.agents.values() if specs[a.node_id] not in (None, a.running) and a.status != "down"]
        self.step = f"agents_follow {outcomes}"
        for agent, outcome in zip(told, outcomes, strict=False):
            if outcome == "slow":  # not restarted yet
                continue
            self.leave(agent)
            if outcome == "upgrade":
                self.report(agent, specs[agent.node_id])
            elif outcome == "old_version":
                self.report(agent, agent.running)

    @rule(i=PICK, rejoin=st.booleans())
    def fail_upgrade(self, i, rejoin) -> None:
        """An agent told to upgrade goes down and never comes back, or comes back on its old version."""
        specs = self.spec_versions()
        agent = self.pick([a for a in self.agents_where("up") if specs[a.node_id] not in (None, a.running)], i)
        if agent is None:
            return
        self.step = f"fail_upgrade {agent.node_id} rejoin={rejoin}"
        self.leave(agent)
        if rejoin:
            self.report(agent, agent.running)

    @rule(i=PICK)
    def leave_session(self, i) -> None:
        agent = self.pick(self.agents_where("up"), i)
        if agent is not None:
            self.step = f"leave {agent.node_id}"
            self.leave(agent)

    @rule(i=PICK)
    def hang(self, i) -> None:
        """The agent stops heartbeating without leaving (it goes offline once its heartbeats are stale)."""
        agent = self.pick(self.agents_where("up"), i)
        if agent is not None:
            self.step = f"hang {agent.node_id}"
            agent.status = "hung"

    @rule(i=PICK)
    def come_back(self, i) -> None:
        agent = self.pick(self.agents_where("down", "hung"), i)
        if agent is not None:
            self.step = f"come_back {agent.node_id} on {agent.running}"
            self.report(agent, agent.running)

    @rule(i=PICK)
    def heartbeat(self, i) -> None:
        agent = self.pick(self.agents_where("up"), i)
        if agent is not None:
            self.step = f"heartbeat {agent.node_id}"
            self.report(agent, agent.running)

    # --- operators -----------------------------------------------------------------------

    def _rollout_action(self, i, name: str, legal_from: tuple, call) -> str | None:
        rollout_id = self.pick(self.rollouts, i)
        before = Rollout.objects.get(pk=rollout_id).state
        self.step = f"{name} {rollout_id} ({before})"
        try:
            call(rollout_id)
        except InvalidState:
            assert before not in legal_from, f"{name} of a {before} rollout was refused"
            return None
        assert before in legal_from, f"{name} of a {before} rollout was accepted"
        return rollout_id

    # One rule, weighted: an abort ends a rollout's story, so it comes less often than pause and resume.
    @rule(i=PICK, action=st.sampled_from(["pause", "resume", "pause", "resume", "abort", "abort_rollback"]))
    def operator(self, i, action) -> None:
        if action == "pause":
            self._rollout_action(i, "pause", (R.ACTIVE,), lambda rid: rollout_pause(rollout_id=rid))
            return
        if action == "resume":
            self._rollout_action(i, "resume", (R.PAUSED,), lambda rid: rollout_resume(rollout_id=rid))
            return
        rollback = action == "abort_rollback"
        rollout_id = self._rollout_action(
            i, action, Rollout.ACTIVE_STATES, lambda rid: rollout_abort(rollout_id=rid, rollback=rollback)
        )
        if rollout_id is None:
            return
        rows = NodeUpgrade.objects.filter(rollout_id=rollout_id)
        assert not rows.filter(state=S.PENDING).exists(), "abort left pending nodes"
        if rollback:
            kept = rows.filter(state=S.IN_FLIGHT)
            assert not kept.exclude(reason=NodeUpgrade.Reason.PREVIOUS_NOT_REGISTERED).exists(), (
                "abort with rollback left nodes in flight that had a registered release to go back to"
            )

    @rule(i=PICK, kind=st.sampled_from(list(Workflow.Kind.values)))
    def start_workflow(self, i, kind) -> None:
        node_id = self.pick(list(self.agents), i)
        self.step = f"workflow_start {kind} on {node_id}"
        busy = (node_id, kind) in self.workflows.values()
        # Refusals for the budget are not judged here: the budget invariant judges what was let in.
        code = None
        try:
            workflow = workflow_start(tenant=self.tenant, node_id=node_id, kind=kind)
        except Conflict as exc:
            code = exc.code
        if code is not None:
            assert code in ("workflow_active", "budget_exhausted"), code
            assert (code == "workflow_active") == busy, f"{code} while busy={busy}"
            return
        assert not busy, "a second active workflow of the same kind on a node"
        self.workflows[workflow.id] = (node_id, kind)

    @rule(i=PICK, again=st.booleans())
    def finish_workflow(self, i, again) -> None:
        if again and self.finished_workflows:
            workflow_id = self.pick(self.finished_workflows, i)
            with pytest.raises(InvalidState):
                workflow_finish(tenant=self.tenant, workflow_id=workflow_id)
            return
        workflow_id = self.pick(list(self.workflows), i)
        if workflow_id is None:
            return
        self.step = f"workflow_finish {workflow_id}"
        workflow_finish(tenant=self.tenant, workflow_id=workflow_id)
        del self.workflows[workflow_id]
        self.finished_workflows.append(workflow_id)

    @precondition(
        lambda self: (
            len(self.rollouts) < 3 and not any(state in Rollout.ACTIVE_STATES for state in self.rollout_states.values())
        )
    )
    @rule(waves=WAVES, ratio=RATIOS, soak=SOAKS, timeout=TIMEOUTS, seed=SEEDS)
    def create_rollout(self, waves, ratio, soak, timeout, seed) -> None:
        """Another rollout of the same pools: refused exactly while a node is still held."""
        self.step = "create_rollout"
        self.create(waves=waves, ratio=ratio, soak=soak, timeout=timeout, seed=seed)

    # --- the invariants ------------------------------------------------------------------

    @invariant()
    def model_invariants(self) -> None:
        now = self.now
        rows = list(
            NodeUpgrade.objects.filter(rollout__tenant=self.tenant).values(
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
        )
        if not rows:  # before setup
            return
        rollouts = {
            r["id"]: r
            for r in Rollout.objects.filter(tenant=self.tenant).values("id", "state", "current_wave", "soak_seconds")
        }
        waves: dict[UUID, dict[int, dict]] = {}
        for wave in RolloutWave.objects.filter(rollout__tenant=self.tenant).values():
            waves.setdefault(wave["rollout_id"], {})[wave["index"]] = wave
        specs = dict(Node.objects.filter(tenant=self.tenant).values_list("id", "spec"))
        step = self.step

        # The harness: the model's idea of who is online is the fleet's.
        online = set(Node.objects.filter(online_node_q(now=now), tenant=self.tenant).values_list("id", flat=True))
        model_online = {a.node_id for a in self.agents.values() if self.online(a)}
        assert online == model_online, "harness: the model's online nodes differ from the fleet's"

        # (5) legal moves, rows and rollouts.
        created = bool(set(rollouts) - set(self.rollout_states))
        moved: list[tuple[dict, str]] = []
        for row in rows:
            before = self.rows.get(row["id"])
            if before is None:
                assert row["state"] == S.PENDING, f"after {step}: a new row is {row['state']}, not pending"
                continue
            if before != row["state"]:
                finished = rollouts[row["rollout_id"]]["state"] in Rollout.TERMINAL_STATES
                # CONTRACT 9.6: a skipped node of a completed rollout converges when it comes back.
                convergence = (before, row["state"]) == (S.SKIPPED, S.IN_FLIGHT) and finished
                # A new rollout takes the in-flight nodes of a finished one (they are in no active rollout).
                superseded = (before, row["state"]) == (S.IN_FLIGHT, S.CANCELLED) and finished and created
                assert (before, row["state"]) in LEGAL_ROW_MOVES or convergence or superseded, (
                    f"after {step}: node upgrade {row['id']} moved {before} -> {row['state']}"
                )
                moved.append((row, before))
                event(f"node upgrade {before} -> {row['state']}")  # --hypothesis-show-statistics: what was reached
        for rollout_id, rollout in rollouts.items():
            before = self.rollout_states.get(rollout_id)
            if before is None:
                assert rollout["state"] == R.ACTIVE, f"after {step}: a new rollout is {rollout['state']}"
            elif before != rollout["state"]:
                assert (before, rollout["state"]) in LEGAL_ROLLOUT_MOVES, (
                    f"after {step}: rollout moved {before} -> {rollout['state']}"
                )
                event(f"rollout {before} -> {rollout['state']}")

        by_rollout: dict[UUID, list[dict]] = {}
        for row in rows:
            by_rollout.setdefault(row["rollout_id"], []).append(row)

        # (5) completion only when every wave has settled.
        for rollout_id, rollout in rollouts.items():
            if rollout["state"] == R.COMPLETED and self.rollout_states.get(rollout_id) != R.COMPLETED:
                unsettled = [r for r in by_rollout[rollout_id] if r["state"] == S.PENDING]
                unsettled += [
                    r
                    for r in by_rollout[rollout_id]
                    if r["state"] == S.IN_FLIGHT and self.rows.get(r["id"]) != S.SKIPPED
                ]
                assert not unsettled, f"after {step}: completed with {len(unsettled)} node(s) not settled"
                assert all(w["settled_at"] is not None for w in waves[rollout_id].values()), (
                    f"after {step}: completed with a wave not settled"
                )
                assert rollout["current_wave"] == max(waves[rollout_id]), (
                    f"after {step}: completed before the last wave"
                )
            if rollout["state"] == R.ABORTED:
                assert not any(r["state"] == S.PENDING for r in by_rollout[rollout_id]), (
                    "an aborted rollout has pending nodes"
                )

        # (3) waves in order, the soak, and no start outside an active rollout.
        for row, before in moved:
            if before != S.PENDING or row["state"] not in (S.IN_FLIGHT, S.SKIPPED):
                continue
            rollout = rollouts[row["rollout_id"]]
            if row["state"] == S.IN_FLIGHT:
                assert rollout["state"] == R.ACTIVE, f"after {step}: a node started in a {rollout['state']} rollout"
            earlier = [r for r in by_rollout[row["rollout_id"]] if r["wave"] < row["wave"]]
            open_ = [r for r in earlier if r["state"] not in SETTLED]
            assert not open_, (
                f"after {step}: a node of wave {row['wave']} {row['state']} while {len(open_)} node(s) "
                f"of earlier waves had not settled"
            )
            previous_wave = [r for r in earlier if r["wave"] == row["wave"] - 1]
            if row["state"] == S.IN_FLIGHT and previous_wave:
                soak_end = max(r["settled_at"] for r in previous_wave) + timedelta(seconds=rollout["soak_seconds"])
                assert row["started_at"] >= soak_end, f"after {step}: wave {row['wave']} started before the soak ended"

        # (2) one writer.
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

        # (4) succeeded nodes keep the target; failed and rolled-back ones were sent back (latest started row rules).
        latest: dict[UUID, dict] = {}
        for row in sorted((r for r in rows if r["started_at"]), key=lambda r: (r["started_at"], r["id"])):
            latest[row["node_id"]] = row
        for node_id, row in latest.items():
            version = ((specs[node_id] or {}).get("daemon") or {}).get("version")
            if row["state"] in (S.IN_FLIGHT, S.SUCCEEDED):
                assert version == row["target_version"], (
                    f"after {step}: a {row['state']} node's spec.daemon is {version}, not its target"
                )
            elif row["state"] in (S.FAILED, S.ROLLED_BACK):
                expected = sent_back_version(row, self.agents[node_id].arch)
                assert version == expected, f"after {step}: a {row['state']} node is told {version}, not {expected}"

        # (1) the budget, with the contract's definition of disrupted computed here.
        for row, _ in moved:
            if row["state"] == S.FAILED and not self.online(self.agents[row["node_id"]]):
                self.failed_down.add(row["node_id"])
        in_flight = {r["node_id"] for r in rows if r["state"] == S.IN_FLIGHT}
        workflows = {node_id for node_id, _ in self.workflows.values()}
        for budget, nodes in self.pools.values():
            disrupted = {n for n in nodes if n in workflows or n in in_flight or n in self.failed_down}
            limit = allowed(budget, len(nodes))
            assert len(disrupted) <= limit, (
                f"after {step}: pool with budget {budget} x {len(nodes)} nodes has {len(disrupted)} disrupted "
                f"(allowed {limit}): {len(disrupted & workflows)} with a workflow, "
                f"{len(disrupted & in_flight)} in flight, "
                f"{len(disrupted & self.failed_down)} failed and not online since (CONTRACT 5, Start)"
            )

        self.rows = {r["id"]: r["state"] for r in rows}
        self.rollout_states = {rid: r["state"] for rid, r in rollouts.items()}


MODEL_SETTINGS = settings(
    max_examples=20,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_controller_keeps_its_invariants_under_random_interleavings(releases, monkeypatch):
    # Rollout ids come from the example (see _next_rollout_id); Field.get_default reads this cached callable.
    monkeypatch.setitem(vars(Rollout._meta.pk), "_get_default", _rollout_id)
    run_state_machine_as_test(ControllerModel, settings=MODEL_SETTINGS)
    assert Rollout.objects.count() == 0  # every example rolled its savepoint back


def test_a_failed_node_that_never_came_back_keeps_its_budget_slot(tenant, releases):
    """The smallest case the model found (CONTRACT 5, Start): a node whose upgrade failed and that has not been
    online since is still down and still uses the budget; the slot frees when its agent reports again."""
    with time_machine.travel(START, tick=False) as traveller:
        nodes = fleet(tenant, {"a": (4, "0.25")}, now=START)["a"]  # allowed 1
        spec = rollout_spec(version=NEW, waves=[100], max_failure_ratio=1, upgrade_timeout_seconds=60)
        rollout = rollout_create(tenant=tenant, spec=spec)
        assert tick(rollout).started == 1
        (upgrade,) = in_flight(rollout)
        agent_session_leave(node=Node.objects.get(pk=upgrade.node_id))  # restarting, and it never comes back
        others = [node for node in nodes if node.id != upgrade.node_id]
        for _ in range(7):  # 70 s of the others heartbeating through the real path: the server hears the fleet
            traveller.shift(timedelta(seconds=10))
            for node in others:
                node = Node.objects.select_related("session").get(pk=node.id)
                agent_session_report(node=node, daemon_version=OLD, protocol_version=PROTOCOL)
        result = tick(rollout)
        assert result.failed == 1
        assert result.started == 0, "a node started while a failed node that never came back still used the slot"
        node = Node.objects.select_related("session").get(pk=upgrade.node_id)
        agent_session_report(node=node, daemon_version=OLD, protocol_version=PROTOCOL)  # back, on its old version
        assert tick(rollout).started == 1
