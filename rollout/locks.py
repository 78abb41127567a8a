"""Advisory-lock keys, in one place so no two features pick the same number."""

from __future__ import annotations

from django.db import connection

# pg_advisory_xact_lock keys (bigint). Arbitrary, distinct, stable.
RELEASE_REGISTRY_LOCK = 0x726F6C6C_0001  # serialises release registration (the sequence check)
# The root chain: exclusive to add a root (version N+1 once), shared by registrations (they verify
# against the newest root, which must not change under them).
ROOT_CHAIN_LOCK = 0x726F6C6C_0002


def advisory_xact_lock(key: int, *, shared: bool = False) -> None:
    """Hold ``key`` (exclusively, or ``shared`` with other shared holders) until the transaction ends (PostgreSQL).

    SQLite needs nothing: its write transactions are already serial
    (settings use transaction_mode IMMEDIATE).
    """
    if connection.vendor == "postgresql":
        function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(%s)", [key])
