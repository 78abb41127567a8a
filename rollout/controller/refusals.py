"""A node's agent refused the release it was sent (docs/signing.md#what-an-agent-checks).

The agent reports it on its next session call (``"refused": {"version", "code",
"detail"}``); the host passes it on through ``fleet.plugins.node_daemon_refused``
before it builds the answer. The node's in-flight upgrade to that version fails
at once with ``reason: "refused:<code>"`` (no wait for the timeout), its spec
goes back as on a timeout (in the same answer), the failure counts in its
wave's failure ratio, and the rollout records ``node_upgrade.refused``. A
refusal of a version the node is not being upgraded to changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import structlog
from django.db import transaction
from django.utils import timezone

from rollout.controller.daemons import send_back_rows
from rollout.controller.events import NodeUpgradeRefused, event_record
from rollout.controller.tick_requests import rollout_request_tick
from rollout.controller.upgrade_transitions import fail_and_send_back
from rollout.models import NodeUpgrade, Rollout

log = structlog.get_logger("rollout")


def refusal_reason(code: str) -> str | None:
    """The node upgrade reason of a refusal code (``refused:<code>``), None for a code the module does not know."""
    reason = f"refused:{code}"
    return reason if reason in NodeUpgrade.Reason.values else None


def node_upgrade_settle_refused(
    *, node_id: UUID, version: str, code: str, detail: str, at: datetime | None = None
) -> bool:
    """The node's agent refused ``version``: its in-flight upgrade to it fails and goes back. Returns whether it did.

    Only an upgrade still waiting for its node (in flight, not yet arrived on the target) fails:
    a refusal of another version, or one that comes after the node settled, is logged and ignored.
    ``at``: the session call that reported it (its ``last_seen_at``), now by default.
    """
    reason = refusal_reason(code)
    if reason is None:
        log.warning("node_upgrade.refusal_unknown_code", node=str(node_id), version=version, code=code)
        return False
    now = at or timezone.now()
    with transaction.atomic():
        locked = NodeUpgrade.objects.filter(
            node_id=node_id, state=NodeUpgrade.State.IN_FLIGHT, target_version=version, arrived_at__isnull=True
        ).select_for_update(of=("self",))
        rows = send_back_rows(locked)
        failed = fail_and_send_back(rows=rows, reason=reason, at=now) if rows else 0
        if not failed:
            log.info("node_upgrade.refusal_ignored", node=str(node_id), version=version, code=code)
            return False
        rollout = Rollout.objects.select_related("release").get(pk=rows[0].rollout_id)
        # The version is the rollout's (its log line names it).
        event_record(rollout=rollout, payload=NodeUpgradeRefused(node=str(node_id), code=code, detail=detail), at=now)
        rollout_request_tick(rollout_id=rollout.id)  # the failure ratio is judged now, not at the next period
    return True
