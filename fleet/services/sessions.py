"""Agent sessions: join, heartbeat, leave. The hot path of a large fleet.

A plain heartbeat (the session is open and the agent reports the version it
already had) is ONE statement (``agent_heartbeat``): it authenticates by token
hash, reads the node's spec, session and pending commands, and moves
``last_seen_at`` in a data-modifying CTE, whatever the fleet's size.

``last_seen_at`` writes are coalesced: a heartbeat writes it only when the
stored value is at least one ``heartbeatSeconds`` old (or the protocol
version changed). The stored value then lags the agent's last heartbeat by
less than one interval, so a node that stops heartbeating is seen offline at
most one interval early, never late: online/offline stays exact to within one
heartbeat interval (docs/architecture.md#scale-targets). What the agent gets back is read in the same
statement, so a spec or command committed before the heartbeat is in its answer.

A join (no session yet, or the agent left) or a version change locks the
session row, records the new state, completes the node's daemon.upgrade
commands to that version (self-terminating), runs the plug-ins' join steps
(``fleet.plugins.JoinStep``: rollout's settle) and, after the commit, hands them
their results and sends ``fleet.plugins.node_session_reported``: one statement too
(``agent_session_report_for_token``; ``agent_session_report`` for a node already
loaded, which also takes refusals). The statements are in ``session_statements.py``;
the "``last_seen_at`` is due" rule is written once there (``last_seen_due_sql``), and
``last_seen_due`` reads it over a session already in memory (the async front's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, partial
from typing import Any
from uuid import UUID

import structlog
from django.db import transaction
from django.utils import timezone

from core.errors import Unavailable
from core.statements import NamedRows, prepared_cursor
from fleet.models import Command, Node, NodeSession
from fleet.plugins import JoinStep, join_steps, node_daemon_refused, node_session_reported, session_fields
from fleet.services.liveness import pulse_params
from fleet.services.nodes import heartbeat_seconds
from fleet.services.revision import spec_revision
from fleet.services.session_statements import HEARTBEAT_SQL, LEAVE_SQL, HeartbeatRow, JoinRow, join_sql

log = structlog.get_logger(__name__)

#: The session statements' rows, read by column name (positions found once per statement text).
_ROWS = NamedRows()


@dataclass(frozen=True)
class SessionReport:
    """What the agent gets back: its desired state and pending commands (and whose node they are)."""

    spec: dict[str, Any]
    commands: list[dict[str, Any]]
    heartbeat_seconds: int
    joined: bool
    node_id: UUID | None = None
    #: The transaction of the join's statement that read this report (None for a plain heartbeat's, which sends no
    #: notification): its own watch notifications do not make the read stale (fleet/watch/known.py). Not answered.
    written_by: str | None = field(default=None, compare=False)
    #: The web process the session records as watching it once the statement is done (``NodeSession.watched_by``,
    #: a hub's ident): only that process may remember the read (fleet/watch/known.py). Not answered.
    watched_by: str | None = field(default=None, compare=False)
    #: What plug-ins add to every answer (``fleet.plugins.register_session_fields``), read when the report is
    #: made: on the thread that reads the database, never in the async front's event loop.
    fields: dict[str, Any] = field(default_factory=session_fields)

    @cached_property  # read on arrival and again in the answer: one digest per report
    def spec_revision(self) -> str:
        """Changes when, and only when, the spec or the pending commands change (docs/fleet.md#watch)."""
        return spec_revision(spec=self.spec, commands=self.commands)


def last_seen_due(*, last_seen_at: datetime, now: datetime) -> bool:
    """Whether a plain heartbeat at ``now`` writes ``last_seen_at``, for a session read already (the async front's):
    ``session_statements.last_seen_due_sql`` with ``due`` one heartbeat interval before ``now``."""
    return last_seen_at <= now - timedelta(seconds=heartbeat_seconds()) or last_seen_at > now


def agent_heartbeat(
    *,
    token_hash: str,
    daemon_version: str,
    protocol_version: int,
    now: datetime | None = None,
    watcher: str | None = None,
) -> SessionReport | None:
    """A plain heartbeat of the node whose agent token hashes to ``token_hash``, in one statement.

    None when it is not one, and then nothing was written: an unknown token, no open session, or another
    daemon version (the caller takes the full path: 401, or ``agent_session_report``). ``watcher``: the web
    process that will remember the read, recorded as the session's watcher if the statement writes the row.
    """
    now = now or timezone.now()
    seconds = heartbeat_seconds()
    params = _statement_params(token_hash, daemon_version, protocol_version, now, seconds, watcher)
    with prepared_cursor() as cursor:
        cursor.execute(HEARTBEAT_SQL, params)
        found = cursor.fetchone()
        if found is None:
            return None
        row: HeartbeatRow
        (row,) = _ROWS.read(HEARTBEAT_SQL, cursor.description, found, (HeartbeatRow,))
    if row.daemon_version != daemon_version or row.left_at is not None:
        return None
    return SessionReport(
        spec=json.loads(row.spec),
        commands=json.loads(row.commands),
        heartbeat_seconds=seconds,
        joined=False,
        node_id=row.node_id,
        watched_by=row.watched_by,
    )


def _statement_params(
    token_hash: str, daemon_version: str, protocol_version: int, now: datetime, seconds: int, watcher: str | None
) -> dict[str, Any]:
    """What the heartbeat's and the join's statements are given (session_statements.py)."""
    return {
        **pulse_params(now=now),
        "token_hash": token_hash,
        "due": now - timedelta(seconds=seconds),
        "protocol": protocol_version,
        "version": daemon_version,
        "pending": Command.State.PENDING,
        "always": False,
        "watcher": watcher,
    }


def agent_node(*, token_hash: str) -> Node | None:
    """The node whose agent token hashes to ``token_hash``, with its session, in one query; None when unknown."""
    return Node.objects.select_related("session").filter(agent_token_hash=token_hash).first()


def agent_session_report(
    *,
    node: Node,
    daemon_version: str,
    protocol_version: int,
    refused: dict[str, str] | None = None,
    now: datetime | None = None,
) -> SessionReport:
    """Join or heartbeat for ``node``: ``agent_session_report_for_token``'s statement for a node already loaded.

    ``refused`` (``{"version", "code", "detail"}``, validated by the caller): the agent refused the
    daemon its spec named. Plug-ins hear it first (``node_daemon_refused``, synchronously), so that
    a spec they send back is already in this answer. A refusal's call is always written: the node is seen
    at the instant its upgrade failed, so the failure does not hold its pool's budget slot (docs/controller.md:
    a failed node that is back does not).
    """
    now = now or timezone.now()
    if refused is not None:
        _send_refused(node_id=node.id, at=now, **refused)
    report = _session_report(
        token_hash=node.agent_token_hash,
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        now=now,
        always=refused is not None,
        watcher=None,
    )
    if report is None:  # deleted since it was loaded
        raise Node.DoesNotExist(f"node {node.id} is gone")
    return report


def _session_joined(
    *,
    node_id: UUID,
    daemon_version: str,
    protocol_version: int,
    previous_version: str | None,
    upgrade_commands_done: int,
    steps: list[tuple[JoinStep, Any]],
) -> None:
    """A join was recorded: log it, and tell the plug-ins once it is committed (their ``steps``, each with its
    columns of the statement's row, and then ``node_session_reported``)."""
    log.info(
        "fleet.session.reported",
        node_id=str(node_id),
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        previous_version=previous_version,
        upgrade_commands_done=upgrade_commands_done,
    )

    def committed() -> None:
        # The session is committed whatever a plug-in does: a failure is logged, not the agent's problem
        # (the rollout controller's periodic tick settles what a lost notice would have).
        for step, row in steps:
            try:
                step.committed(node_id=node_id, daemon_version=daemon_version, row=row)
            except Exception as exc:
                _receiver_failed(step.committed, exc, node_id)
        _send_reported(
            node_id=node_id,
            daemon_version=daemon_version,
            protocol_version=protocol_version,
            previous_version=previous_version,
        )

    transaction.on_commit(committed)


def _send_reported(*, node_id: UUID, daemon_version: str, protocol_version: int, previous_version: str | None) -> None:
    for receiver, result in node_session_reported.send_robust(
        sender=NodeSession,
        node_id=node_id,
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        previous_version=previous_version,
    ):
        if isinstance(result, Exception):
            _receiver_failed(receiver, result, node_id)


def _receiver_failed(receiver: Any, error: Exception, node_id: UUID) -> None:
    log.error(
        "fleet.session.receiver_failed",
        receiver=getattr(receiver, "__qualname__", repr(receiver)),
        error=repr(error),
        node_id=str(node_id),
    )


def _send_refused(*, node_id: UUID, version: str, code: str, detail: str, at: datetime) -> None:
    log.info("fleet.session.refused", node_id=str(node_id), version=version, code=code, detail=detail)
    failed = False
    for receiver, result in node_daemon_refused.send_robust(
        sender=NodeSession, node_id=node_id, version=version, code=code, detail=detail, at=at
    ):
        if isinstance(result, Exception):
            failed = True
            _receiver_failed(receiver, result, node_id)
    if failed:
        # Not heard: the agent keeps the refusal and sends it again with its next call (nothing is written).
        raise Unavailable("The refusal could not be recorded; report it again.", code="refusal_not_recorded")


def agent_session_report_for_token(
    *,
    token_hash: str,
    daemon_version: str,
    protocol_version: int,
    now: datetime | None = None,
    watcher: str | None = None,
) -> SessionReport | None:
    """``agent_session_report`` for the node whose agent token hashes to ``token_hash`` (a join, a version change or
    a heartbeat, without a refusal); None, and nothing written, when the token is unknown. ``watcher``: as
    ``agent_heartbeat``'s.

    One statement (``session_statements.join_sql``, the plug-ins' join steps in it) and the plug-ins' notice after
    its commit.
    """
    return _session_report(
        token_hash=token_hash,
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        now=now or timezone.now(),
        always=False,
        watcher=watcher,
    )


def agent_session_arrival(
    *,
    token_hash: str,
    daemon_version: str,
    protocol_version: int,
    now: datetime,
    join_first: bool = False,
    watcher: str | None = None,
) -> SessionReport | None:
    """A session request as the async front takes it on one of its threads, in one hop: the plain heartbeat's
    statement (``agent_heartbeat``), and when it is not one, the join's (``agent_session_report_for_token``), both at
    ``now``. The report; None, and nothing written, for an unknown token.

    ``join_first``: the request is likely a join (a watching agent's first request, docs/fleet.md#watch), so the join's
    statement runs alone. It is a heartbeat's too when the session turns out to be open on that version (it then
    locks the row for a moment: the price of a wrong guess), so the answer is the same either way. ``watcher``: as
    ``agent_heartbeat``'s."""
    statement = partial(
        agent_session_report_for_token,
        token_hash=token_hash,
        daemon_version=daemon_version,
        protocol_version=protocol_version,
        now=now,
        watcher=watcher,
    )
    if not join_first:
        report = agent_heartbeat(**statement.keywords)  # the same arguments
        if report is not None:
            return report
    return statement()


def _session_report(
    *, token_hash: str, daemon_version: str, protocol_version: int, now: datetime, always: bool, watcher: str | None
) -> SessionReport | None:
    """``join_sql``; ``always``: the session row is written even when a heartbeat's write would be coalesced;
    ``watcher``: as ``agent_heartbeat``'s."""
    seconds = heartbeat_seconds()
    steps = join_steps()
    # The steps' parameters first: one named as the host's is the host's value, never a change to its statement.
    params = {name: value for step in steps for name, value in step.params.items()}
    params.update(_statement_params(token_hash, daemon_version, protocol_version, now, seconds, watcher))
    params.update(done=Command.State.DONE, upgrade=Command.Kind.DAEMON_UPGRADE, always=always)
    sql = join_sql(steps)
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchone()
        if found is None:
            return None
        row: JoinRow
        row, *step_rows = _ROWS.read(sql, cursor.description, found, (JoinRow, *(step.record for step in steps)))
    if row.joined:
        _session_joined(
            node_id=row.node_id,
            daemon_version=daemon_version,
            protocol_version=protocol_version,
            previous_version=row.previous_version,
            upgrade_commands_done=row.upgrade_commands_done,
            steps=list(zip(steps, step_rows, strict=True)),
        )
    return SessionReport(
        spec=json.loads(row.spec),
        commands=json.loads(row.commands),
        heartbeat_seconds=seconds,
        joined=row.joined,
        node_id=row.node_id,
        written_by=row.written_by,
        watched_by=row.watched_by,
    )


def agent_session_leave(*, node: Node, now: datetime | None = None) -> bool:
    """The agent is going down: the node is offline until it joins again. Idempotent; one UPDATE."""
    return bool(agent_session_leave_for_token(token_hash=node.agent_token_hash, now=now))


def agent_session_leave_for_token(*, token_hash: str, now: datetime | None = None) -> bool | None:
    """``agent_session_leave`` for the node whose agent token hashes to ``token_hash``; None, and nothing written,
    when the token is unknown."""
    with prepared_cursor() as cursor:  # one statement: every node leaves once per upgrade
        cursor.execute(LEAVE_SQL, {"token_hash": token_hash, "now": now or timezone.now()})
        row = cursor.fetchone()
    return None if row is None else bool(row[0])
