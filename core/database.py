"""A database that is down, restarting or unreachable: the API answers 503 ``database_unavailable``.

Used by the DRF exception handler (core/exceptions.py), the middleware for plain
views (core/middleware.py) and the 500 handler (project/urls.py). Imports
nothing of ours, so each can import it. A command that cannot connect at all
(manage.py) prints ``connection_failure_line``'s one sentence instead.
"""

from __future__ import annotations

import re

import structlog
from django.conf import settings
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


_MISSING = re.compile(r'database "(?P<name>[^"]+)" does not exist')


def connection_failure_line(exc: BaseException) -> str | None:
    """One line that says why a command could not connect and what to run, for an error raised while
    connecting (manage.py prints it instead of the driver's traceback); None for any other error."""
    message = str(exc)
    if not isinstance(exc, OperationalError) or not message.startswith("connection failed"):
        return None
    database = settings.DATABASES["default"]
    host, port, user = database.get("HOST") or "localhost", database.get("PORT") or 5432, database.get("USER")
    missing = _MISSING.search(message)
    if missing:
        return (
            f'PostgreSQL at {host}:{port} has no database "{missing["name"]}": create it with '
            f"`createdb -h {host} -p {port} -U {user} {missing['name']}`, then run `manage.py migrate` "
            "(or set DATABASE_URL to another database)."
        )
    reason = message.rsplit("failed:", 1)[-1].strip().splitlines()[0]
    return (
        f"cannot connect to PostgreSQL at {host}:{port} (DATABASE_URL): {reason}. Start the server "
        "(scripts/services.sh starts a local one) or set DATABASE_URL; `make demo` runs a PostgreSQL of its own."
    )
