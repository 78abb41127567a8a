"""What a plan decides for a pending row (docs/controller.md#the-plan): a move, and the blocker code it shows.

The vocabulary shared by the plan (rollout/controller/plan.py), a pool's turn (turns.py), the tick that
executes it (start.py) and the blockers that render it (rollout/rollouts/blockers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rollout.models import NodeUpgrade


class Move(StrEnum):
    START = "start"
    SKIP = "skip"
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    """What the next tick does with a pending row, and the blocker code the row shows for it."""

    move: Move
    code: str
    #: Why it is skipped (a NodeUpgrade.Reason), for ``Move.SKIP``.
    reason: str | None = None


START = Decision(Move.START, "next_tick")
SKIP_NO_BINARY = Decision(Move.SKIP, "next_tick", NodeUpgrade.Reason.NO_BINARY)
SKIP_OFFLINE = Decision(Move.SKIP, "offline", NodeUpgrade.Reason.OFFLINE)
WAIT_OFFLINE = Decision(Move.WAIT, "offline")
WAIT_BUDGET = Decision(Move.WAIT, "budget_full")
WAIT_WINDOW = Decision(Move.WAIT, "outside_window")
WAIT_SOAK = Decision(Move.WAIT, "soaking")
WAIT_WAVE = Decision(Move.WAIT, "wave_not_started")
WAIT_PAUSED = Decision(Move.WAIT, "rollout_paused")
WAIT_GATE = Decision(Move.WAIT, "gate")
WAIT_SCHEDULE = Decision(Move.WAIT, "scheduled")
WAIT_APPROVAL = Decision(Move.WAIT, "awaiting_approval")


class Settle(StrEnum):
    """What the tick does with an in-flight row (docs/controller.md#the-tick, Settle)."""

    SUCCEED = "succeed"
    ARRIVE = "arrive"
    TIMEOUT = "timeout"
    READY = "ready"
    NOT_READY = "not_ready"


#: The order the settles are written in.
SETTLE_ORDER = (Settle.SUCCEED, Settle.ARRIVE, Settle.TIMEOUT, Settle.READY, Settle.NOT_READY)
