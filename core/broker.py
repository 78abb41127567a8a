"""Is the Celery broker reachable? A real connection with a short timeout, for ``GET /api/compute/health``
(docs/operations.md#health).

Redis and RabbitMQ (amqp) are connected to as a worker would (kombu, with the settings' broker URL and
transport options) but with no retry and a timeout of about 1 s: a probe asking every few seconds sees a broker
that stopped within seconds. The embedded brokers of local runs and the demo (``filesystem://``, ``memory://``)
have no server to lose: they count as reachable.
"""

from __future__ import annotations

import structlog
from django.conf import settings
from kombu import Connection

log = structlog.get_logger(__name__)

#: Seconds to wait for the broker before it counts as unavailable.
BROKER_TIMEOUT_SECONDS = 1.0
EMBEDDED = ("filesystem://", "memory://")


def broker_reachable(*, timeout: float = BROKER_TIMEOUT_SECONDS) -> bool:
    """True when a connection to ``CELERY_BROKER_URL`` opens within ``timeout`` seconds (embedded: always)."""
    url = str(getattr(settings, "CELERY_BROKER_URL", "") or "")
    if not url or url.startswith(EMBEDDED):
        return True
    options = {
        **(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}),
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "connect_timeout": timeout,
    }
    try:
        with Connection(url, connect_timeout=timeout, transport_options=options) as connection:
            connection.ensure_connection(max_retries=0, interval_start=0, timeout=max(1, round(timeout)))
    except Exception as exc:  # any failure to connect (socket, protocol, authentication): unavailable
        log.warning("broker.unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
        return False
    return True
