"""Prepared statements for the hot paths: the agent session's (fleet/services/session_statements.py) and the join's
settle (rollout/controller/statements.py), each run many times a second on a persistent connection."""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from django.db import connection

#: Connections told not to wait for each commit's WAL flush (``commit_without_flush_wait``).
_NOT_WAITING: weakref.WeakSet[Any] = weakref.WeakSet()


class _PreparingCursor(psycopg.Cursor[Any]):
    """Server-side binding, each statement prepared on first use on its connection (psycopg keeps them)."""

    def execute(  # same call as psycopg's, typed loosely
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        # Django turns automatic preparing off (prepare_threshold=None), which also ignores prepare=True:
        # lift it for this statement only, so Django's own queries are never prepared.
        conn = self.connection
        threshold = conn.prepare_threshold
        conn.prepare_threshold = 1 << 30 if threshold is None else threshold
        try:
            return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)
        finally:
            conn.prepare_threshold = threshold


def constant_array(values: Iterable[str]) -> str:
    """An SQL array of code constants (states, kinds: lower-case words), written into a hot statement's text rather
    than bound: psycopg adapts a list parameter at every call, which cost the join path more web CPU than its
    statements' other parameters together (a tenth of it during a 10,000-agent rollout, profiled)."""
    words = [str(value) for value in values]
    if not words or not all(re.fullmatch(r"[a-z_]+", word) for word in words):
        raise ValueError(f"not constants: {words!r}")
    return "ARRAY[" + ", ".join(f"'{word}'" for word in words) + "]::text[]"


def prepared_cursor() -> Any:
    """A Django cursor (its execute wrappers and query log apply) whose statements are prepared.

    Planning the heartbeat statement costs PostgreSQL more than running it; prepared once per
    persistent connection, it is planned once. Django leaves prepared
    statements off (``prepare_threshold=None``) for transaction-mode poolers; this statement needs a
    direct connection or a pooler that supports them (PgBouncer 1.21+ with psycopg 3.2+).
    """
    if connection.queries_logged:
        # DEBUG or CaptureQueriesContext: Django's own cursor, whose query
        # log shows the SQL with its values (it cannot render a prepared statement's). Same statement, same
        # results; the live-server tests and the benchmarks run the prepared one.
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    return connection.make_cursor(_PreparingCursor(connection.connection))  # type: ignore[arg-type]


def commit_without_flush_wait() -> None:
    """This thread's connection commits without waiting for the WAL flush (PostgreSQL ``synchronous_commit=off``).

    Only for the agent session threads (fleet/watch/front.py): their heartbeats, joins, leaves and the settles
    they trigger are what an agent sends again by itself, so a database crash that loses the last moments of
    them (at most three ``wal_writer_delay``, 0.6 s by default) costs a rejoin, never a wrong state; waiting
    for the flush made every join wait for the disk, and others for its locks meanwhile.
    docs/operations.md#session-commits says what this trades. Once per connection.
    """
    connection.ensure_connection()
    raw = connection.connection
    if raw in _NOT_WAITING:
        return
    with raw.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    _NOT_WAITING.add(raw)


class ColumnsMismatch(RuntimeError):
    """A statement's columns are not those its readers name: a column added, renamed or dropped on one side only."""


class NamedRows:
    """Rows of statements read by column name into typed records (``NamedTuple`` classes), never by position.

    ``records``: the classes that share each row, in order (the host's own, then each plug-in's); together their
    fields are the statement's columns, every one named once. The positions of a statement's columns are looked up
    in the cursor's description the first time that statement's text runs, checked then (``ColumnsMismatch``), and
    kept: a row then costs one tuple per record, no dict and no lookup by name.
    """

    def __init__(self) -> None:
        self._positions: dict[tuple[str, tuple[type[Any], ...]], tuple[tuple[int, ...], ...]] = {}

    def read(
        self, sql: str, description: Sequence[Any], row: Sequence[Any], records: tuple[type[Any], ...]
    ) -> list[Any]:
        """``row`` of the statement ``sql`` (whose cursor's ``description`` is given) as one record per class."""
        key = (sql, records)
        positions = self._positions.get(key)
        if positions is None:
            positions = self._positions[key] = column_positions(description, records)
        return [record._make(map(row.__getitem__, at)) for record, at in zip(records, positions, strict=True)]


def column_positions(description: Sequence[Any], records: tuple[type[Any], ...]) -> tuple[tuple[int, ...], ...]:
    """For each record class, the positions of its fields among the columns ``description`` names; every column
    must be one record's field and every field one column (else ``ColumnsMismatch``, naming the difference)."""
    names = [column.name for column in description]
    fields = [name for record in records for name in record._fields]
    if len(set(names)) != len(names) or sorted(names) != sorted(fields):
        unread = sorted(set(names) - set(fields))
        missing = sorted(set(fields) - set(names))
        raise ColumnsMismatch(f"columns {names}: not read {unread}, not selected {missing}, or a name twice")
    at = {name: index for index, name in enumerate(names)}
    return tuple(tuple(at[name] for name in record._fields) for record in records)
