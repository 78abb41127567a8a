"""The operators' actions on a rollout (one service call each), confirmed on an intermediate page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.contrib import admin
from django.utils import timezone

from rollout.controller.transitions import rollout_promotable
from rollout.models import Rollout
from rollout.rollouts.actions import rollout_abort, rollout_pause, rollout_promote, rollout_resume, rollout_start


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
    bulk: str  # the changelist's admin action's description
    danger: bool = False
    # Whether the detail page shows its button (beyond ``states``), e.g. promote only while soaking.
    shown: Callable[[Rollout], bool] | None = None

    @property
    def admin_action(self) -> str:
        """The name of the changelist's admin action."""
        return f"{self.slug.replace('-', '_')}_selected"


def bulk_admin_action(action: RolloutAction) -> Callable[..., Any]:
    """The changelist's admin action of ``action``: the same confirmation, then its service on each rollout."""

    def run(modeladmin: Any, request: Any, queryset: Any) -> Any:
        return modeladmin.run_bulk(request, queryset, action.slug)

    run.__name__ = action.admin_action
    return admin.action(description=action.bulk, permissions=["operate"])(run)


ACTIONS: dict[str, RolloutAction] = {
    action.slug: action
    for action in (
        RolloutAction(
            "start",
            "Start now",
            "Started",
            (Rollout.State.SCHEDULED,),
            "The scheduled rollout starts at once, without waiting for its start time: its first wave starts "
            "at the next tick. Its deadline, if it has one, still applies.",
            rollout_start,
            "Start the selected scheduled rollouts now",
        ),
        RolloutAction(
            "pause",
            "Pause",
            "Paused",
            (Rollout.State.ACTIVE,),
            "No new node starts; nodes already in flight still settle.",
            rollout_pause,
            "Pause the selected rollouts",
        ),
        RolloutAction(
            "resume",
            "Resume",
            "Resumed",
            (Rollout.State.PAUSED,),
            "Starts continue. Failures seen so far in the current wave are accepted; only new ones pause again.",
            rollout_resume,
            "Resume the selected rollouts",
        ),
        RolloutAction(
            "promote",
            "Promote",
            "Promoted",
            (Rollout.State.ACTIVE,),
            "Ends the current wave's soak now: the next wave starts at the next tick.",
            rollout_promote,
            "Promote the selected rollouts (end their soak now)",
            shown=lambda rollout: rollout_promotable(rollout, at=timezone.now()),
        ),
        RolloutAction(
            "abort",
            "Abort",
            "Aborted",
            Rollout.HOLDING_STATES,
            "Pending nodes are cancelled; nodes in flight go on and settle. Succeeded nodes are not touched. "
            "An aborted rollout cannot be resumed.",
            partial(rollout_abort, rollback=False),
            "Abort the selected rollouts",
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
            "Abort the selected rollouts and roll back nodes in flight",
            danger=True,
        ),
    )
}
