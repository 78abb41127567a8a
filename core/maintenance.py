"""Vacuuming the tables running rollouts rewrite, whether or not autovacuum keeps up.

See docs/operations.md#table-maintenance.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import Model


def tables_vacuum(models: Sequence[type[Model]]) -> bool:
    """``VACUUM (ANALYZE, SKIP_LOCKED)`` the tables of ``models``: dead row versions gone, the planner's statistics
    fresh; a table another vacuum holds is skipped. Only outside a transaction (VACUUM cannot run in one): False
    when it did not run."""
    if connection.in_atomic_block:
        return False
    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in models)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE, SKIP_LOCKED) {tables}")
    return True
