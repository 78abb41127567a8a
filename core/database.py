"""A database that is down, restarting or unreachable: the API answers 503 ``database_unavailable``.

Used by the DRF exception handler (core/exceptions.py), the middleware for plain
views (core/middleware.py) and the 500 handler (project/urls.py). Imports
nothing of ours, so each can import it.
"""

from __future__ import annotations

import structlog
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

log = structlog.get_logger(__name__)

#: What the database driver raises when the server is down, restarting or unreachable (psycopg's
#: OperationalError also covers a killed connection). A client should retry: 503, not 500.
DATABASE_ERRORS = (OperationalError, InterfaceError)
DATABASE_UNAVAILABLE = {"code": "database_unavailable", "detail": "The database is unavailable; retry shortly."}
RETRY_AFTER_SECONDS = "5"


def database_unavailable(exc: BaseException) -> JsonResponse:
    """The 503 of a request the database could not serve (also used outside DRF: core/middleware.py)."""
    log.warning("database.unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
    response = JsonResponse(DATABASE_UNAVAILABLE, status=503)
    response["Retry-After"] = RETRY_AFTER_SECONDS
    return response
