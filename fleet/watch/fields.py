"""The plug-ins' fields of a session answer (``fleet.plugins.session_fields``) as the async front serves them.

An answer at ``wait`` repeats an earlier read (nothing changed), and one held from memory (fleet/watch/known.py)
repeats one older still; the fields it carries are the newest any statement read, and are read again, once for
all requests, when they are older than ``FIELDS_FRESH_SECONDS``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from fleet.services.sessions import SessionReport

log = structlog.get_logger(__name__)

#: An answer carries the plug-ins' fields as read at most this long ago; older, they are read again first.
FIELDS_FRESH_SECONDS = 5.0


class FreshFields:
    """The newest plug-ins' fields this process read, and when (the loop's time the read began)."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._read = read  # the front's read on a session thread
        self._fields: tuple[float, dict[str, Any]] = (-math.inf, {})
        self._reading: asyncio.Task[None] | None = None

    async def fresh(self, report: SessionReport) -> SessionReport:
        """``report`` with fields read at most FIELDS_FRESH_SECONDS ago. One read at a time; a failed one keeps
        the fields there are."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._fields[0] > FIELDS_FRESH_SECONDS:
            if self._reading is None:
                self._reading = loop.create_task(self._read_again())
            await asyncio.shield(self._reading)
        fields = self._fields[1] if self._fields[0] > -math.inf else report.fields
        return report if report.fields == fields else dataclasses.replace(report, fields=fields)

    def seen(self, since: float, fields: dict[str, Any]) -> None:
        """Fields read by a statement that began at ``since``: kept unless a read that began later is kept."""
        if since >= self._fields[0]:
            self._fields = (since, fields)

    async def _read_again(self) -> None:
        since = asyncio.get_running_loop().time()
        try:
            self.seen(since, await self._read())
        except Exception as exc:  # the database is down: the answer keeps the fields it has
            log.warning("fleet.watch.fields_failed", error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self._reading = None
