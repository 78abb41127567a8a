"""Advisory-lock keys, in one place so no two features pick the same number."""

from __future__ import annotations

from django.db import connection

# pg_advisory_xact_lock keys (bigint). Arbitrary, distinct, stable.
RELEASE_REGISTRY_LOCK = 0x726F6C6C_0001  # serialises release registration (the sequence check)


def advisory_xact_lock(key: int) -> None:
    """Hold ``key`` until the current transaction ends (PostgreSQL).

    SQLite needs nothing: its write transactions are already serial
    (settings use transaction_mode IMMEDIATE).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
