"""The rollout module's models, one module per capability; Django finds them all through this package."""

from rollout.models.approvals import RolloutApproval
from rollout.models.gates import RolloutGate
from rollout.models.health import ControllerBeat, TickScheduleWritten
from rollout.models.releases import Release, ReleaseBinary, ReleaseBlock, ReleaseRoot, binary_storage_name
from rollout.models.rollouts import (
    NodeUpgrade,
    Rollout,
    RolloutEvent,
    RolloutWave,
    TickRequest,
    end_passed,
    start_ahead,
)
from rollout.models.webhooks import Webhook, WebhookDelivery

__all__ = [
    "ControllerBeat",
    "NodeUpgrade",
    "Release",
    "ReleaseBinary",
    "ReleaseBlock",
    "ReleaseRoot",
    "Rollout",
    "RolloutApproval",
    "RolloutEvent",
    "RolloutGate",
    "RolloutWave",
    "TickRequest",
    "TickScheduleWritten",
    "Webhook",
    "WebhookDelivery",
    "binary_storage_name",
    "end_passed",
    "start_ahead",
]
