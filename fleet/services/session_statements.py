"""The agent session's SQL: a plain heartbeat, a join, a leave and the held nodes' touch and read, each ONE statement.

``fleet/services/sessions.py`` runs the first three (``agent_heartbeat``, ``agent_session_report_for_token``,
``agent_session_leave_for_token``), ``fleet/services/watch.py`` the others. Their rules are written here once:
when ``last_seen_at`` is written (``last_seen_due_sql``), and the fleet pulse (``fleet/services/liveness.py``
``pulse_ctes``). tests/fleet/test_heartbeat_paths.py and tests/fleet/test_join_paths.py hold the statements to
those rules over generated states. Why one statement: a fleet's agents call these constantly (a heartbeat each
interval, a join after every restart), and each query through the ORM costs the web tier more CPU than
PostgreSQL spends running it (docs/benchmarks.md).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from core.statements import constant_array
from fleet.models import Command, Node, NodeSession
from fleet.plugins import JoinStep
from fleet.services.commands import OPEN_STATES
from fleet.services.liveness import pulse_ctes


def last_seen_due_sql(alias: str) -> str:
    """The "``last_seen_at`` is due" rule: a session ``alias`` whose stored value is at or before ``%(due)s`` (a
    heartbeat interval before ``%(now)s`` for a heartbeat, less for the held nodes' touch) or ahead of ``%(now)s``
    (the clock stepped back) is written; otherwise the write is coalesced (fleet/services/sessions.py says why)."""
    return f"({alias}.last_seen_at <= %(due)s OR {alias}.last_seen_at > %(now)s)"


# What a heartbeat answers with: the node's pending commands, oldest first, as commands_pending reads them.
_PENDING_COMMANDS = f"""(SELECT coalesce(json_agg(json_build_object('id', c.id, 'kind', c.kind, 'payload', c.payload)
                              ORDER BY c.created_at, c.id), '[]')::text
     FROM {Command._meta.db_table} AS c WHERE c.node_id = node.id AND c.state = %(pending)s)"""  # noqa: S608


# The session's watcher (``NodeSession.watched_by``) as a statement that writes the row leaves it: ``%(watcher)s``, a
# web process's hub that will remember what the statement reads (fleet/watch/known.py), or the one recorded when
# null (any other caller). An arrival never writes the row for that alone: after a restart of the web tier, every
# agent's first arrival would be a write in the reconnect storm. The process records itself for the nodes it holds
# in its keeper's touch instead (``HELD_TOUCH_SQL``), one UPDATE for all of them.
_WATCHER = "coalesce(%(watcher)s::text, s.watched_by)"

# One statement for a plain heartbeat. The UPDATE runs only for an open session on the same version whose
# last_seen_at is due (or whose protocol version changed); the SELECT reads the snapshot the statement started
# with, so the caller sees whether the session was open on that version, and every command committed before. Its
# last column: the watcher the session records after the statement (the UPDATE's, else the snapshot's).
# tests/fleet/test_heartbeat_paths.py holds it to its rules.
HEARTBEAT_SQL = f"""
WITH node AS (
    SELECT id, spec FROM {Node._meta.db_table} WHERE agent_token_hash = %(token_hash)s
), plain AS (
    -- A plain heartbeat: the session is open on the reported version (else nothing is written here).
    SELECT s.node_id FROM node JOIN {NodeSession._meta.db_table} AS s ON s.node_id = node.id
    WHERE s.left_at IS NULL AND s.daemon_version = %(version)s
), touched AS (
    UPDATE {NodeSession._meta.db_table} AS s SET
        last_seen_at = %(now)s, protocol_version = %(protocol)s, watched_by = {_WATCHER}
    FROM node
    WHERE s.node_id = node.id AND s.left_at IS NULL AND s.daemon_version = %(version)s
      AND ({last_seen_due_sql("s")} OR s.protocol_version <> %(protocol)s)
    RETURNING s.node_id, s.watched_by
), {pulse_ctes("plain")}
SELECT node.spec::text AS spec, s.daemon_version AS daemon_version, s.left_at AS left_at, node.id AS node_id,
    {_PENDING_COMMANDS} AS commands, coalesce((SELECT watched_by FROM touched), s.watched_by) AS watched_by
FROM node LEFT JOIN {NodeSession._meta.db_table} AS s ON s.node_id = node.id
"""  # noqa: S608 - table names from the models, values bound


class HeartbeatRow(NamedTuple):
    """``HEARTBEAT_SQL``'s row, read by column name (core.statements.NamedRows)."""

    spec: str
    daemon_version: str | None
    left_at: datetime | None
    node_id: UUID
    commands: str
    watched_by: str | None


# The nodes a web process holds, counted seen (fleet/services/watch.py ``held_sessions_touch``, its rule), and
# recorded as watched by it (``%(watcher)s``, its hub's ident; null: the watchers stay) where they were not.
HELD_TOUCH_SQL = f"""
UPDATE {NodeSession._meta.db_table} AS s SET last_seen_at = %(now)s, watched_by = {_WATCHER}
WHERE s.node_id = ANY(%(node_ids)s::uuid[]) AND s.left_at IS NULL
  AND ({last_seen_due_sql("s")} OR s.watched_by IS DISTINCT FROM {_WATCHER})
"""  # noqa: S608 - table names from the models, values bound


# The held requests a notification woke, read again in one statement for all of them, writing nothing
# (fleet/services/watch.py ``held_sessions_read``): their nodes' spec and pending commands as a heartbeat reads
# them, and their sessions as they stand (with the watcher they record).
HELD_READ_SQL = f"""
SELECT asked.token_hash AS token_hash, node.id AS node_id, node.spec::text AS spec, s.daemon_version AS daemon_version,
    s.protocol_version AS protocol_version, s.left_at AS left_at, s.last_seen_at AS last_seen_at,
    {_PENDING_COMMANDS} AS commands, s.watched_by AS watched_by
FROM unnest(%(token_hashes)s::text[]) AS asked(token_hash)
JOIN {Node._meta.db_table} AS node ON node.agent_token_hash = asked.token_hash
LEFT JOIN {NodeSession._meta.db_table} AS s ON s.node_id = node.id
"""  # noqa: S608 - table names from the models, values bound


class HeldReadRow(NamedTuple):
    """A row of ``HELD_READ_SQL``, read by column name."""

    token_hash: str
    node_id: UUID
    spec: str
    daemon_version: str | None
    protocol_version: int | None
    left_at: datetime | None
    last_seen_at: datetime | None
    commands: str
    watched_by: str | None


# One statement for a join (no session yet, the agent left, or another daemon version), or for a heartbeat that
# a concurrent join made plain meanwhile. The session row is read under its lock (``prior``), so the choice
# between a join and a heartbeat is made on the row as it stands, never on a stale read; a first session that a
# concurrent join inserts meanwhile is met by ON CONFLICT. A join completes the node's open daemon.upgrade
# commands to the version it reports, which the answer's pending commands then leave out (the final SELECT reads
# the snapshot the statement started with). Its last columns are the statement's transaction id when it wrote (its
# watch notifications name it: fleet/migrations/0010_watch_notify_transaction.py), and the watcher the session
# records after it (``%(watcher)s`` recorded when the statement writes the row, as in the heartbeat's).
# ``always`` (a refusal's call): the row is written even when a heartbeat's write would be coalesced.
# The plug-ins' join steps (fleet.plugins.JoinStep) run in it too, in its transaction: ``join_sql``.
# tests/fleet/test_join_paths.py holds it to its rules.
_JOIN_CTES = f"""
WITH node AS (
    SELECT id, spec FROM {Node._meta.db_table} WHERE agent_token_hash = %(token_hash)s
), prior AS MATERIALIZED (
    SELECT s.node_id, s.daemon_version, s.left_at, s.protocol_version, s.last_seen_at, s.watched_by
    FROM {NodeSession._meta.db_table} AS s JOIN node ON s.node_id = node.id
    FOR UPDATE OF s
), rejoined AS (
    -- Written unless it is a heartbeat whose last_seen_at write is coalesced.
    UPDATE {NodeSession._meta.db_table} AS s SET
        joined_at = CASE WHEN prior.left_at IS NULL AND prior.daemon_version = %(version)s
                         THEN s.joined_at ELSE %(now)s END,
        daemon_version = %(version)s,
        protocol_version = %(protocol)s,
        last_seen_at = %(now)s,
        left_at = NULL,
        watched_by = {_WATCHER}
    FROM prior
    WHERE s.node_id = prior.node_id
      AND (%(always)s OR prior.left_at IS NOT NULL OR prior.daemon_version <> %(version)s
           OR prior.protocol_version <> %(protocol)s OR {last_seen_due_sql("prior")})
    RETURNING s.node_id, (prior.left_at IS NOT NULL OR prior.daemon_version <> %(version)s) AS joined, s.watched_by
), created AS (
    -- The node's first session. One that a concurrent first join inserts meanwhile is met by ON CONFLICT,
    -- whose CASE keeps that join's joined_at when it recorded this version: this one is then a heartbeat.
    INSERT INTO {NodeSession._meta.db_table} AS s
        (node_id, daemon_version, protocol_version, joined_at, last_seen_at, left_at, watched_by)
    SELECT node.id, %(version)s, %(protocol)s, %(now)s, %(now)s, NULL, %(watcher)s::text
    FROM node WHERE NOT EXISTS (SELECT 1 FROM prior)
    ON CONFLICT (node_id) DO UPDATE SET
        joined_at = CASE WHEN s.left_at IS NULL AND s.daemon_version = EXCLUDED.daemon_version
                         THEN s.joined_at ELSE EXCLUDED.joined_at END,
        daemon_version = EXCLUDED.daemon_version,
        protocol_version = EXCLUDED.protocol_version,
        last_seen_at = EXCLUDED.last_seen_at,
        left_at = NULL,
        watched_by = coalesce(EXCLUDED.watched_by, s.watched_by)
    RETURNING s.node_id, s.joined_at = %(now)s AS joined, s.watched_by
), recorded AS (
    SELECT node_id, joined, watched_by FROM rejoined UNION ALL SELECT node_id, joined, watched_by FROM created
), joined_node AS (
    -- What the plug-ins' join steps read (fleet.plugins.JoinStep): the node, when this is a join.
    SELECT node_id FROM recorded WHERE joined
), done AS (
    UPDATE {Command._meta.db_table} AS c SET state = %(done)s, completed_at = %(now)s
    FROM joined_node
    WHERE c.node_id = joined_node.node_id AND c.kind = %(upgrade)s
      AND c.state = ANY({constant_array(OPEN_STATES)}) AND c.payload -> 'version' = to_jsonb(%(version)s::text)
    RETURNING c.id
), {pulse_ctes("node")}"""  # noqa: S608 - table names from the models, values bound

_JOIN_COLUMNS = f"""node.spec::text AS spec, node.id AS node_id, coalesce(recorded.joined, false) AS joined,
    prior.daemon_version AS previous_version, (SELECT count(*) FROM done) AS upgrade_commands_done,
    (SELECT coalesce(json_agg(json_build_object('id', c.id, 'kind', c.kind, 'payload', c.payload)
                              ORDER BY c.created_at, c.id), '[]')::text
     FROM {Command._meta.db_table} AS c
     WHERE c.node_id = node.id AND c.state = %(pending)s AND c.id NOT IN (SELECT id FROM done)) AS commands,
    pg_current_xact_id_if_assigned()::text AS written_by,
    CASE WHEN recorded.node_id IS NOT NULL THEN recorded.watched_by ELSE prior.watched_by END AS watched_by"""  # noqa: S608


class JoinRow(NamedTuple):
    """The join statement's own columns (``join_sql``), read by column name; its steps' follow, each read into its
    step's ``record``."""

    spec: str
    node_id: UUID
    joined: bool
    previous_version: str | None
    upgrade_commands_done: int
    commands: str
    written_by: str | None
    watched_by: str | None


@functools.cache
def join_sql(steps: tuple[JoinStep, ...] = ()) -> str:
    """The join's statement with ``steps`` in it (``fleet.plugins.join_steps()``, the plug-ins'): their CTEs after
    its own, their columns (``expression AS name``) after its ``JoinRow``'s, in the steps' order."""
    ctes = "".join(f",\n{step.ctes}" for step in steps)
    columns = "".join(f",\n    {sql} AS {name}" for step in steps for name, sql in step.columns.items())
    rows = "FROM node LEFT JOIN prior ON true LEFT JOIN recorded ON true"
    return f"{_JOIN_CTES}{ctes}\nSELECT {_JOIN_COLUMNS}{columns}\n{rows}\n"


# One statement for a leave: no row for an unknown token; else whether an open session was closed.
LEAVE_SQL = f"""
WITH node AS (
    SELECT id FROM {Node._meta.db_table} WHERE agent_token_hash = %(token_hash)s
), closed AS (
    UPDATE {NodeSession._meta.db_table} AS s SET left_at = %(now)s
    FROM node WHERE s.node_id = node.id AND s.left_at IS NULL
    RETURNING s.node_id
)
SELECT EXISTS (SELECT 1 FROM closed) FROM node
"""  # noqa: S608 - table names from the models, values bound
