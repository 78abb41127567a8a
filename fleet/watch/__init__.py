"""The web tier's async part: held agent sessions (docs/architecture.md#watch). ``application()`` builds the ASGI
application that ``project/asgi.py`` serves."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.db import connections

from fleet.services.watch import NOTIFY_CHANNEL
from fleet.watch.admission import Admission
from fleet.watch.front import AgentSessionFront
from fleet.watch.hub import WatchHub

#: Django's connection parameters that are not libpq's (psycopg's cursor class and adapters, its preparing).
_DJANGO_ONLY = ("cursor_factory", "context", "prepare_threshold")


def listen_conninfo() -> dict[str, Any]:
    """How the hub connects to LISTEN: the default database's parameters, named in pg_stat_activity."""
    database = connections["default"]
    params = {k: v for k, v in database.get_connection_params().items() if k not in _DJANGO_ONLY}
    # TCP keepalives: a peer that vanished (no RST, no FIN) is noticed by the kernel within about a minute.
    keepalives = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
    return {**params, **keepalives, "application_name": "rollout-watch"}


def application() -> AgentSessionFront:
    """The ASGI application; the settings are valid here (fleet/checks.py stops the server otherwise)."""
    wsgi_application = get_wsgi_application()  # sets Django up
    hub = WatchHub(
        conninfo=listen_conninfo(),
        channel=NOTIFY_CHANNEL,
        reconnect_seconds=int(settings.FLEET_WATCH_RECONNECT_SECONDS),
        ping_seconds=int(settings.FLEET_WATCH_PING_SECONDS),
    )
    admission = Admission(bound=int(settings.WEB_SESSIONS_IN_PROGRESS))
    return AgentSessionFront(
        wsgi_application=wsgi_application, threads=int(settings.WEB_THREADS), hub=hub, admission=admission
    )
