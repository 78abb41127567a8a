"""Asking for a tick of one rollout soon, debounced (the join path, operator actions, the tick itself)."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import structlog
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from core.statements import prepared_cursor
from rollout.controller.statements import ASK_TICK_SQL, END_TICK_SQL
from rollout.dispatch import TICK_TASK, publish_on_commit
from rollout.locks import advisory_lock_tried, tick_waiter_key
from rollout.models import Rollout, TickRequest

log = structlog.get_logger("rollout")


def rollout_request_tick(*, rollout_id: UUID | str, countdown: float = 0.0) -> None:
    """Ask for a tick of one rollout soon, debounced: at most one is queued at a time, and none is sent while a
    tick runs (it ticks again when it ends: ``tick_request_end``).

    The flag is cleared when a tick starts; the periodic tick clears it too, so a lost message (or a worker
    killed while its tick ran) delays a rollout by one period at most.
    """
    if tick_request_raise(rollout_id=rollout_id):
        tick_send(rollout_id=rollout_id, countdown=countdown)


def tick_request_raise(*, rollout_id: UUID | str) -> bool:
    """Flip the rollout's tick request from idle to queued; whether this call flipped it while no tick runs (and
    so must send the tick). Only while the rollout is active or paused. One prepared statement."""
    with prepared_cursor() as cursor:
        cursor.execute(ASK_TICK_SQL, {"rollout": rollout_id, "now": timezone.now()})
        row = cursor.fetchone()
    return row is not None and row[0]


#: How long a tick's running mark holds at most: a worker killed while it ticks leaves one, which lapses.
RUNNING_LEASE = timedelta(seconds=60)


def tick_request_start(*, rollout_id: UUID | str) -> None:
    """A tick starts, before it reads anything: the request is cleared (a tick asked for from now on comes after
    this one) and the tick marked running. Its own statement, committed: the askers read the mark."""
    TickRequest.objects.filter(rollout_id=rollout_id).update(queued=False, running_until=timezone.now() + RUNNING_LEASE)


def tick_request_end(*, rollout_id: UUID | str) -> bool:
    """A tick ended (committed or not): its mark cleared; whether a tick was asked for while it ran. Then the
    request stays raised and the caller must see to it: tick again, or send the tick (``tick_send``)."""
    with prepared_cursor() as cursor:
        cursor.execute(END_TICK_SQL, {"rollout": rollout_id})
        row = cursor.fetchone()
    return row is not None and row[0]


def tick_send(*, rollout_id: UUID | str, countdown: float = 0.0) -> None:
    """Send the tick a raised request stands for: raised by this caller, or found raised by ``tick_request_end``."""
    publish_on_commit(TICK_TASK, args=[str(rollout_id)], countdown=countdown)


#: How long an asked tick waits for the tick that holds its rollout before asking again a second later.
HOLDER_WAIT_SECONDS = 5
LOCK_NOT_AVAILABLE = "55P03"


def holder_awaited(*, rollout_id: UUID | str) -> bool:
    """Whether this worker, whose tick found the rollout held by another's, waited for that tick to end and so
    should tick now (docs/controller.md#reacting-at-once). PostgreSQL only.

    One worker per rollout waits (the rollout's waiter lock, ``rollout.locks.tick_waiter_key``), and it lets
    the lock go before it ticks; the others return False at once: the waiter's tick reads after them, so it
    sees what their askers settled. False too when the holder's tick outlasts ``HOLDER_WAIT_SECONDS`` (a tick
    is asked for a second later, as without a waiter) or the rollout is gone.
    """
    with advisory_lock_tried(tick_waiter_key(rollout_id)) as waiter:
        if not waiter:
            return False
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{HOLDER_WAIT_SECONDS}s"])
                # Blocks until the holder commits; released at once: the tick takes the lock itself.
                exists = Rollout.objects.select_for_update().filter(pk=rollout_id).values_list("pk").first()
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            exists = None
            outlasted = True
        else:
            outlasted = False
    if outlasted:
        # Asked once the waiter lock is let go: a tick that failed to take it meanwhile cleared the request
        # first, so this ask raises it and sends the tick (asked while still waiter, it could find the request
        # raised by an ask whose tick then returned at once, relying on this waiter).
        log.info("rollout.tick_holder_outlasted_wait", rollout=str(rollout_id), seconds=HOLDER_WAIT_SECONDS)
        rollout_request_tick(rollout_id=rollout_id, countdown=1)
        return False
    return exists is not None
