"""The controller against a small reference model (docs/controller.md#the-tick): random interleavings, invariants
after every step.

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
rules. "Not online since it failed" is judged as a lower bound every reading of
the rule agrees on: the node was offline when it failed and its agent has not
reported since. A node that failed while heartbeating on its old version is not
counted. And a timeout must fail an overdue node only once the server has heard
the fleet for a whole online window (liveness is judged against the fleet).
Creating a rollout is refused exactly while a node is in an active or paused
rollout (docs/controller.md#create): the in-flight nodes of an aborted one may be taken over (the old
row then goes in_flight -> cancelled).

The fleet and its agents are ``tests/rollout/model_fleet.py``, the invariants
``tests/rollout/model_invariants.py``; this module holds the controller's and the
operators' rules and the tests.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from core.errors import Conflict, InvalidState
from fleet.models import Node, Workflow
from fleet.services.sessions import agent_session_leave, agent_session_report
from fleet.services.workflows import workflow_finish, workflow_start
from rollout import tasks
from rollout.controller.tick import rollout_tick, rollouts_tick_all
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.actions import rollout_abort, rollout_pause, rollout_resume
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.helpers import in_flight, tick
from tests.rollout.model_fleet import (
    NEW,
    OLD,
    OUTCOMES,
    PICK,
    PROTOCOL,
    RATIOS,
    SEEDS,
    SOAKS,
    START,
    TIMEOUTS,
    WAVES,
    ModelFleet,
    example_rollout_id,
)
from tests.rollout.model_invariants import check_invariants

pytestmark = pytest.mark.django_db

S = NodeUpgrade.State
R = Rollout.State


class ControllerModel(ModelFleet):
    """The model's fleet with the controller's and the operators' rules; the invariants after every step."""

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
        # (docs/controller.md#the-tick, liveness against the fleet): an overdue node that looks offline may then wait.
        assert not (self.fleet_heard() and NodeUpgrade.objects.filter(pk=row["id"], state=S.IN_FLIGHT).exists()), (
            f"{how} left an overdue node in flight"
        )

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

    # --- the invariants (tests/rollout/model_invariants.py) ---------------------------------

    @invariant()
    def model_invariants(self) -> None:
        check_invariants(self)


MODEL_SETTINGS = settings(
    max_examples=20,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_controller_keeps_its_invariants_under_random_interleavings(releases, monkeypatch):
    # Rollout ids come from the example (model_fleet._next_rollout_id); Field.get_default reads this cached callable.
    monkeypatch.setitem(vars(Rollout._meta.pk), "_get_default", example_rollout_id)
    run_state_machine_as_test(ControllerModel, settings=MODEL_SETTINGS)
    assert Rollout.objects.count() == 0  # every example rolled its savepoint back


def test_a_failed_node_that_never_came_back_keeps_its_budget_slot(tenant, releases):
    """The smallest case the model found (docs/controller.md#the-tick, disrupted): a node whose upgrade failed and
    that has not been online since is still down and still uses the budget; the slot frees when its agent reports
    again."""
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
