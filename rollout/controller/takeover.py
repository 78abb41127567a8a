"""A superseding rollout takes over the nodes in flight to the rollout it supersedes.

See docs/controller.md#undoing-a-bad-release.

The superseded rollout's in-flight row is cancelled (``superseded``) and drops its claim
(``upgrade_transitions.hand_over_upgrades``); in the same transaction the new rollout's row for that
node, just inserted pending, moves straight to in flight when the new rollout starts at once (active):

- it is not sent back first: its ``previous_daemon`` and ``previous_version`` are the superseded row's
  (what the node ran before the bad release), so a failure or a rollback later sends it to that release,
  never to the bad one;
- its spec.daemon is set to the new release now (an old agent also gets a ``daemon.upgrade`` command),
  its deadline is the new rollout's ``upgradeTimeoutSeconds`` from now: no timeout of the old rollout is
  waited for;
- it still counts against its pool's budget (it was in flight, it is in flight).

A node whose arch the new release has no binary for, and every taken-over node of a rollout that does
not start at once (awaiting approval, scheduled), stays pending, first in the new rollout's order; its
spec.daemon is left as it is (no node is sent back) until its turn.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from django.db import connection, transaction

from fleet.interface import Command, Node, commands_enqueue
from rollout.controller.daemons import min_protocol_version, set_daemons, signed_releases
from rollout.controller.timeouts import timeouts_due_arm_safely
from rollout.models import NodeUpgrade, Rollout

log = structlog.get_logger("rollout")

_TAKE_OVER_SQL = f"""
UPDATE {NodeUpgrade._meta.db_table} AS nu
SET state = %(in_flight)s, started_at = %(started_at)s, deadline = %(deadline)s,
    previous_daemon = old.previous_daemon, previous_version = old.previous_version
FROM {NodeUpgrade._meta.db_table} AS old
WHERE nu.rollout_id = %(rollout)s AND nu.state = %(pending)s AND nu.node_id = ANY(%(nodes)s::uuid[])
  AND old.rollout_id = %(superseded)s AND old.node_id = nu.node_id
RETURNING nu.node_id
"""  # noqa: S608 - the table name from the model, values bound


def rollout_take_over(*, rollout: Rollout, superseded: Rollout, node_ids: Collection[UUID], at: datetime) -> int:
    """pending -> in_flight for ``rollout``'s rows of ``node_ids`` (handed over by ``superseded``), their
    spec.daemon set to ``rollout``'s release. The caller holds both rollouts' row locks; ``rollout`` is active.
    Returns how many were taken over."""
    if not node_ids:
        return 0
    release = signed_releases(versions=[rollout.release.version])[rollout.release.version]
    nodes = Node.objects.filter(pk__in=list(node_ids)).values_list("pk", "arch", "session__protocol_version")
    sections = {pk: (section, protocol) for pk, arch, protocol in nodes if (section := release.section(arch))}
    if not sections:
        return 0
    deadline = at + timedelta(seconds=rollout.upgrade_timeout_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            _TAKE_OVER_SQL,
            {
                "in_flight": NodeUpgrade.State.IN_FLIGHT,
                "pending": NodeUpgrade.State.PENDING,
                "started_at": at,
                "deadline": deadline,
                "rollout": rollout.id,
                "superseded": superseded.id,
                "nodes": "{" + ",".join(map(str, sections)) + "}",
            },
        )
        taken = [row[0] for row in cursor.fetchall()]
    if not taken:
        return 0
    set_daemons((node_id, sections[node_id][0]) for node_id in taken)
    minimum = min_protocol_version()
    old_agents: list[tuple[UUID, dict[str, Any]]] = [
        (node_id, sections[node_id][0]) for node_id in taken if (sections[node_id][1] or 0) < minimum
    ]
    if old_agents:
        commands_enqueue(node_ids_payloads=old_agents, kind=Command.Kind.DAEMON_UPGRADE)
    transaction.on_commit(lambda: timeouts_due_arm_safely(rollout_id=rollout.id, at=deadline))
    log.info(
        "node_upgrade.taken_over",
        tenant=rollout.tenant_id,
        rollout=str(rollout.id),
        superseded=str(superseded.id),
        nodes=[str(node_id) for node_id in taken],
        version=rollout.release.version,
        deadline=deadline.isoformat(),
    )
    return len(taken)
