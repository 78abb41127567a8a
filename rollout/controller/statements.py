"""The controller's SQL where the ORM costs more than the statement: run by controller/upgrade_transitions.py."""

from __future__ import annotations

from typing import NamedTuple
from uuid import UUID

from core.statements import constant_array
from rollout.models import NodeUpgrade, Rollout, TickRequest

_ACTIVE = constant_array(Rollout.ACTIVE_STATES)  # the rollout states that claim their nodes and may be ticked

# in_flight -> succeeded for the node whose agent rejoined on the target: the join path runs it for every upgraded
# node (docs/controller.md#reacting-at-once), inside the join's own statement (``SETTLE_ON_JOIN_CTES``,
# ``_COLUMNS`` and ``_PARAMS``: a fleet.plugins.JoinStep, rollout/hooks.py), or alone (``SUCCEED_REJOINED_SQL``,
# the same CTEs over one node). ``joined_node``: the node that joined (one row, or none when the join statement
# recorded a heartbeat).
# Only the common case: a row a tick holds locked is skipped, and a row that proves readiness (minReadySeconds > 0,
# or arrived) or whose target is another version is left alone; the caller then takes the ORM path, which decides
# those. The columns: the settled upgrade's rollout and tenant (nulls when none settled), whether the node had an
# upgrade in flight at all (when not, as for every join outside a rollout, there is nothing for the ORM path to
# decide), whether a tick of the rollout is queued and not started (``queued``, share-locked until this commits),
# and the rollout of an in-flight row the lock skipped (a tick holds it: the caller asks for another tick, as the
# ORM path did after finding the row locked, without it).
# A queued tick clears its request before it reads anything (controller/tick.py), and the clear waits for this
# lock: it reads this settle, and the caller asks for nothing.
# Otherwise the caller asks for a tick once this has committed, never in the same transaction (controller/settle.py
# says why). A request cleared after this statement began is not locked (the lock rechecks ``queued`` on the row as
# it stands): then the caller asks. The one lock it may wait for is the tick request's, which its writers hold for a
# statement or an operator's short transaction (controller/tick_requests.py), never while they wait for a session
# row: in the join's statement it waits briefly with the node's session row held, and no cycle can form.
# tests/rollout/test_rejoin_paths.py runs the join's statement, this one alone and the ORM path over the same states,
# and tests/rollout/test_rejoin_tick.py holds the lock to its rule, alone and in the join's transaction.
SETTLE_ON_JOIN_CTES = f"""rollout_locked AS (
    SELECT u.id FROM {NodeUpgrade._meta.db_table} AS u JOIN joined_node AS j ON u.node_id = j.node_id
    WHERE u.state = %(rollout_in_flight)s
    FOR UPDATE OF u SKIP LOCKED
), rollout_settled AS (
    UPDATE {NodeUpgrade._meta.db_table} AS u
    SET state = %(rollout_succeeded)s, settled_at = %(now)s, claims_node = r.state = ANY({_ACTIVE})
    FROM rollout_locked, {Rollout._meta.db_table} AS r
    WHERE u.id = rollout_locked.id AND r.id = u.rollout_id AND u.arrived_at IS NULL AND u.target_version = %(version)s
      AND r.min_ready_seconds = 0
    RETURNING u.rollout_id, r.tenant_id
), rollout_queued AS (
    SELECT t.rollout_id FROM {TickRequest._meta.db_table} AS t JOIN rollout_settled AS s ON t.rollout_id = s.rollout_id
    WHERE t.queued
    FOR SHARE OF t
)"""  # noqa: S608 - table names from the models, values bound

_IN_FLIGHT = f"""{NodeUpgrade._meta.db_table} AS f JOIN joined_node AS j ON f.node_id = j.node_id
     WHERE f.state = %(rollout_in_flight)s"""
SETTLE_ON_JOIN_COLUMNS = {
    "rollout_settled_id": "(SELECT rollout_id FROM rollout_settled)",
    "rollout_tenant_id": "(SELECT tenant_id FROM rollout_settled)",
    "rollout_in_flight": f"EXISTS (SELECT 1 FROM {_IN_FLIGHT})",  # noqa: S608 - table names from the models, values bound
    "rollout_tick_queued": "EXISTS (SELECT 1 FROM rollout_queued)",
    "rollout_held_by_tick": (
        f"(SELECT f.rollout_id FROM {_IN_FLIGHT} AND NOT EXISTS (SELECT 1 FROM rollout_locked) ORDER BY f.id LIMIT 1)"  # noqa: S608
    ),
}


class SettleOnJoin(NamedTuple):
    """The columns above, read by name (core.statements.NamedRows): the settled upgrade's rollout and tenant (None
    when none settled), whether the node had an upgrade in flight, whether a tick of the rollout is queued, and the
    rollout of an in-flight row a tick holds locked."""

    rollout_settled_id: UUID | None
    rollout_tenant_id: int | None
    rollout_in_flight: bool
    rollout_tick_queued: bool
    rollout_held_by_tick: UUID | None


#: What the CTEs and columns above are given besides ``version`` and ``now`` (and ``node``, run alone).
SETTLE_ON_JOIN_PARAMS = {
    "rollout_in_flight": NodeUpgrade.State.IN_FLIGHT,
    "rollout_succeeded": NodeUpgrade.State.SUCCEEDED,
}
SUCCEED_REJOINED_SQL = f"""
WITH joined_node AS (SELECT %(node)s::uuid AS node_id), {SETTLE_ON_JOIN_CTES}
SELECT {", ".join(f"{sql} AS {name}" for name, sql in SETTLE_ON_JOIN_COLUMNS.items())}
"""


# rollout_request_tick's conditional UPDATE (controller/tick_requests.py): the join path asks once per upgraded node,
# and the same UPDATE through the ORM cost the web tier more CPU than the settle (a seventh of it during a 10,000-agent
# rollout). A row when it raised the request: whether no tick is running (then the caller sends one).
# tests/rollout/test_tick_requests.py runs it over the states that decide it.
ASK_TICK_SQL = f"""
UPDATE {TickRequest._meta.db_table} AS t SET queued = true
FROM {Rollout._meta.db_table} AS r
WHERE t.rollout_id = %(rollout)s AND NOT t.queued AND r.id = t.rollout_id AND r.state = ANY({_ACTIVE})
RETURNING t.running_until IS NULL OR t.running_until <= %(now)s
"""  # noqa: S608 - table names from the models, values bound

# A tick's end (controller/tick_requests.py): its running mark cleared, and whether it was asked for meanwhile.
END_TICK_SQL = f"""
UPDATE {TickRequest._meta.db_table} SET running_until = NULL WHERE rollout_id = %(rollout)s RETURNING queued
"""  # noqa: S608 - table names from the models, values bound
