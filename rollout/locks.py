"""Advisory-lock keys, in one place so no two features pick the same number."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

import structlog
from django.db import DatabaseError, connection

log = structlog.get_logger("rollout")

# pg_advisory_xact_lock keys (bigint). Arbitrary, distinct, stable.
RELEASE_REGISTRY_LOCK = 0x726F6C6C_0001  # serialises release registration (the sequence check)
# The root chain: exclusive to add a root (version N+1 once), shared by registrations (they verify
# against the newest root, which must not change under them).
ROOT_CHAIN_LOCK = 0x726F6C6C_0002


def tick_waiter_key(rollout_id: UUID | str) -> int:
    """The key of a rollout's tick waiter (``tick_requests.holder_awaited``): the first 8 bytes of its uuid4
    (60 random bits), so two rollouts, or a rollout and a fixed key above, share one by a chance of about 2**-60."""
    return int.from_bytes(UUID(str(rollout_id)).bytes[:8], "big", signed=True)


def advisory_xact_lock(key: int, *, shared: bool = False) -> None:
    """Hold ``key`` (exclusively, or ``shared`` with other shared holders) until the transaction ends."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s)", [key])


@contextmanager
def advisory_lock_tried(key: int) -> Iterator[bool]:
    """Try to hold ``key`` for the block, across transactions (PostgreSQL's session-level lock, never waiting);
    yields whether it is held. Released at the block's end, or by PostgreSQL with the connection. PostgreSQL only."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
                    released = cursor.fetchone()
            except DatabaseError:  # a lost connection takes the lock with it; else Django closes a broken one
                log.warning("rollout.advisory_unlock_failed", key=key, exc_info=True)
            else:
                if not (released and released[0]):  # another server connection (a transaction-mode pooler)
                    log.warning("rollout.advisory_lock_not_held", key=key)
