"""What a plan decides for a pending row (docs/controller.md#the-plan): a move, and the blocker code it shows.

The vocabulary shared by the plan (rollout/controller/plan.py), a pool's turn (turns.py), the tick that
executes it (start.py) and every surface that renders it: the blockers (rollout/rollouts/blockers.py), the
admin's words (blocker_words.py), the API's serializers and the ``rollout_blocked`` metric. ``Code`` is the one
place each code is spelled (tests/rollout/test_codes.py fails when a code's string is written anywhere else).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rollout.models import NodeUpgrade, Rollout


class Code(StrEnum):
    """What a node or a rollout waits for (docs/controller.md#why-not-yet): a blocker's ``code``.

    Four codes are the word of the state or reason they report, taken from it rather than spelled again.
    """

    AWAITING_APPROVAL = Rollout.State.AWAITING_APPROVAL.value
    NO_CONTROLLER = "no_controller"
    SCHEDULED = Rollout.State.SCHEDULED.value
    #: A pending row's: its rollout is paused (or its next tick pauses it).
    ROLLOUT_PAUSED = "rollout_paused"
    #: The rollout's own: it is paused (or its next tick pauses it).
    PAUSED = Rollout.State.PAUSED.value
    GATE = "gate"
    WAVE_NOT_STARTED = "wave_not_started"
    SOAKING = "soaking"
    OUTSIDE_WINDOW = "outside_window"
    OFFLINE = NodeUpgrade.Reason.OFFLINE.value
    BUDGET_FULL = "budget_full"
    NEXT_TICK = "next_tick"
    AWAITING_REJOIN = "awaiting_rejoin"
    PROVING_READY = "proving_ready"
    AWAITING_NODES = "awaiting_nodes"


#: Node blocker codes, in the order of precedence (docs/controller.md#why-not-yet).
NODE_CODES = (
    Code.AWAITING_APPROVAL,
    Code.NO_CONTROLLER,
    Code.SCHEDULED,
    Code.ROLLOUT_PAUSED,
    Code.GATE,
    Code.WAVE_NOT_STARTED,
    Code.SOAKING,
    Code.OUTSIDE_WINDOW,
    Code.OFFLINE,
    Code.BUDGET_FULL,
    Code.NEXT_TICK,
    Code.AWAITING_REJOIN,
    Code.PROVING_READY,
)
#: Rollout blocker codes, in the order of precedence (docs/controller.md#why-not-yet, the rollout representation).
ROLLOUT_CODES = (
    Code.AWAITING_APPROVAL,
    Code.NO_CONTROLLER,
    Code.SCHEDULED,
    Code.PAUSED,
    Code.GATE,
    Code.SOAKING,
    Code.OUTSIDE_WINDOW,
    Code.BUDGET_FULL,
    Code.AWAITING_NODES,
)


class Move(StrEnum):
    START = "start"
    SKIP = "skip"
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    """What the next tick does with a pending row, and the blocker code the row shows for it."""

    move: Move
    code: Code
    #: Why it is skipped (a NodeUpgrade.Reason), for ``Move.SKIP``.
    reason: str | None = None


START = Decision(Move.START, Code.NEXT_TICK)
SKIP_NO_BINARY = Decision(Move.SKIP, Code.NEXT_TICK, NodeUpgrade.Reason.NO_BINARY)
SKIP_OFFLINE = Decision(Move.SKIP, Code.OFFLINE, NodeUpgrade.Reason.OFFLINE)
WAIT_OFFLINE = Decision(Move.WAIT, Code.OFFLINE)
WAIT_BUDGET = Decision(Move.WAIT, Code.BUDGET_FULL)
WAIT_WINDOW = Decision(Move.WAIT, Code.OUTSIDE_WINDOW)
WAIT_SOAK = Decision(Move.WAIT, Code.SOAKING)
WAIT_WAVE = Decision(Move.WAIT, Code.WAVE_NOT_STARTED)
WAIT_PAUSED = Decision(Move.WAIT, Code.ROLLOUT_PAUSED)
WAIT_GATE = Decision(Move.WAIT, Code.GATE)
WAIT_SCHEDULE = Decision(Move.WAIT, Code.SCHEDULED)
WAIT_APPROVAL = Decision(Move.WAIT, Code.AWAITING_APPROVAL)
