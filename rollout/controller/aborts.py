"""An abort, whoever decides it: an operator, a deadline's ``endBehavior``, a gate's ``onFailure``.

Pending rows are cancelled; with ``rollback`` the rows in flight go back to their previous section when
that release is registered (``rolled_back``), else they stay in flight and say why; then the rollout moves
to ``aborted`` with its ``abortedReason`` (docs/controller.md#pause-resume-promote-abort). The caller holds the
rollout's row lock.
"""

from __future__ import annotations

from datetime import datetime

from rollout.controller.settle import node_upgrades_roll_back
from rollout.controller.transitions import abort_rollout
from rollout.controller.upgrade_transitions import cancel_pending_upgrades
from rollout.models import Rollout


def rollout_abort_now(*, rollout: Rollout, now: datetime, actor: str, rollback: bool, reason: str) -> None:
    """Cancel, roll back if asked, and abort (``rollout.aborted``, ``abortedReason`` ``reason``)."""
    cancelled = cancel_pending_upgrades(rollout=rollout, at=now)
    rolled_back, kept = node_upgrades_roll_back(rollout=rollout, now=now) if rollback else (0, 0)
    abort_rollout(
        rollout=rollout,
        at=now,
        actor=actor,
        rollback=rollback,
        cancelled=cancelled,
        rolled_back=rolled_back,
        not_rolled_back=kept,
        reason=reason,
    )
