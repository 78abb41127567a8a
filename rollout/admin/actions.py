"""The operators' actions on a rollout (one service call each), confirmed on an intermediate page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from django.utils import timezone

from rollout.models import Rollout
from rollout.services.rollouts import rollout_abort, rollout_pause, rollout_promote, rollout_resume
from rollout.services.transitions import rollout_soaking


# --- rollouts: actions ------------------------------------------------------------------------
@dataclass(frozen=True)
class RolloutAction:
    """An operator's action on a rollout: one service call, confirmed on an intermediate page."""

    slug: str  # in the detail page's URL: /admin/rollout/rollout/<id>/<slug>/
    title: str
    done: str
    states: tuple[str, ...]  # where the service allows it; elsewhere it answers invalid_state
    explain: str
    run: Callable[..., Rollout]
    danger: bool = False
    # Whether the detail page shows its button (beyond ``states``), e.g. promote only while soaking.
    shown: Callable[[Rollout], bool] | None = None

    @property
    def admin_action(self) -> str:
        """The name of the changelist's admin action."""
        return f"{self.slug.replace('-', '_')}_selected"


ACTIONS: dict[str, RolloutAction] = {
    action.slug: action
    for action in (
        RolloutAction(
            "pause",
            "Pause",
            "Paused",
            (Rollout.State.ACTIVE,),
            "No new node starts; nodes already in flight still settle.",
            rollout_pause,
        ),
        RolloutAction(
            "resume",
            "Resume",
            "Resumed",
            (Rollout.State.PAUSED,),
            "Starts continue. Failures seen so far in the current wave are accepted; only new ones pause again.",
            rollout_resume,
        ),
        RolloutAction(
            "promote",
            "Promote",
            "Promoted",
            (Rollout.State.ACTIVE,),
            "Ends the current wave's soak now: the next wave starts at the next tick.",
            rollout_promote,
            shown=lambda rollout: rollout_soaking(rollout, at=timezone.now()),
        ),
        RolloutAction(
            "abort",
            "Abort",
            "Aborted",
            Rollout.HOLDING_STATES,
            "Pending nodes are cancelled; nodes in flight go on and settle. Succeeded nodes are not touched. "
            "An aborted rollout cannot be resumed.",
            partial(rollout_abort, rollback=False),
            danger=True,
        ),
        RolloutAction(
            "abort-rollback",
            "Abort and roll back",
            "Aborted (with rollback)",
            Rollout.HOLDING_STATES,
            "Pending nodes are cancelled; nodes in flight go back to their previous release when that release "
            "is registered. Succeeded nodes are not touched: undo them by rolling forward to a higher sequence. "
            "An aborted rollout cannot be resumed.",
            partial(rollout_abort, rollback=True),
            danger=True,
        ),
    )
}
