"""The test database's address, for the project's own processes that tests start (gunicorn, Celery, agents)."""

from __future__ import annotations

from django.db import connection


def database_url() -> str:
    """``DATABASE_URL`` for the database this test session runs on (libpq and dj-database-url read it alike)."""
    db = connection.settings_dict
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
