"""The world the controller's reference model runs in (tests/rollout/test_model.py): a small fleet and its agents.

``ModelFleet`` writes the fleet (2 pools of 4 to 6 nodes, each with an open session on 0.9.0), keeps what
the database cannot be trusted to say about itself (each agent's state: up, hung, down; the version it runs;
when it last reported; the workflows started; which failed nodes have not been online since they failed)
and holds the rules of the agents: upgrading on ``spec.daemon``, failing, leaving, hanging, coming back,
heartbeating, time passing. The controller's and the operators' rules, and the invariants, are the test's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import time_machine
from django.db import transaction
from django.test import TestCase
from django.utils import timezone
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from core.errors import Conflict
from fleet.models import Node, NodeSession, Pool
from fleet.services.iam import tenant_create
from fleet.services.nodes import nodes_set_daemon
from fleet.services.sessions import agent_session_leave, agent_session_report
from fleet.tokens import new_token, token_hash
from rollout.controller.daemons import registered_daemon_section
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec

START = datetime(2031, 3, 3, 12, 0, tzinfo=UTC)
HEARTBEAT_SECONDS = 10  # FLEET_HEARTBEAT_SECONDS in tests/rollout/conftest.py
ONLINE_WINDOW = timedelta(seconds=3 * HEARTBEAT_SECONDS)
PROTOCOL = 3
OLD, NEW, UNREGISTERED = "0.9.0", "1.0.0", "0.8.0"
# What the `releases` fixture registers: version -> archs it has a binary for.
REGISTERED = {OLD: {"amd64", "arm64"}, NEW: {"amd64"}}

S = NodeUpgrade.State

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


def example_rollout_id() -> UUID:
    return _next_rollout_id.pop()


@dataclass
class Agent:
    node_id: UUID
    pool_id: UUID
    arch: str
    running: str
    status: str  # "up" (heartbeating), "hung" (session open, silent), "down" (left)
    last_report: datetime


class ModelFleet(RuleBasedStateMachine):
    """The fleet, its agents and time; the subclass adds the controller, the operators and the invariants."""

    tenant_index = 0

    def __init__(self) -> None:
        super().__init__()
        # One savepoint per example inside the test's transaction: every example starts from the same database.
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        self.clock = time_machine.travel(START, tick=False)
        self.traveller = self.clock.start()
        ModelFleet.tenant_index += 1
        self.tenant = tenant_create(slug=f"model-{ModelFleet.tenant_index}")
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
        # A plain heartbeat writes last_seen_at only once it is an interval old (coalesced writes,
        # fleet/services/sessions.py): the fleet's online state is exact to one interval, and the model
        # follows the same rule.
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

        One of them through the real path each period (so the server hears the fleet: liveness is judged against
        the fleet, docs/controller.md#the-tick), the others in one UPDATE (a heartbeat changes nothing else).
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
        """Nodes a new rollout may not take (docs/controller.md#create): those in an active or paused rollout.

        In-flight nodes of an aborted rollout are in no active rollout: a fix-forward takes them.
        """
        active = {rid for rid, state in self.rollout_states.items() if state in Rollout.ACTIVE_STATES}
        return set(NodeUpgrade.objects.filter(rollout_id__in=active).values_list("node_id", flat=True))

    def create(self, *, waves, ratio, soak, timeout, seed) -> None:
        # Unique within the example: hypothesis draws the same seed twice on purpose (a rollout's id is its key).
        _next_rollout_id[:] = [UUID(int=(len(self.rollouts) << 65) | seed)]
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
