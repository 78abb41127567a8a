"""The suite's parallel workers (pytest-xdist, ``make test`` runs ``-n 2``): each gets services of its own.

Loaded with ``-p tests.parallel`` (pyproject.toml), so that it runs before pytest-django reads the settings:
in a worker (xdist sets ``PYTEST_XDIST_WORKER``, ``gw0``, ``gw1``, …) it rewrites the environment that
the settings, and every process a test starts, read:

- the test database: pytest-django already names it per worker (``test_rollout_gw1``);
- Redis (``CELERY_BROKER_URL``, ``CACHE_URL``): worker ``gwN`` uses the database numbered N below the one
  given (15, 14, …), so that no worker's Celery consumes another's tasks (two runs at once on one Redis are
  given databases at least ``TEST_WORKERS`` apart);
- RabbitMQ (``AMQP_URL``): a vhost per worker (``gwN``, or ``<vhost>-gwN``), which scripts/services.sh
  creates (``TEST_WORKERS``).

Without xdist (``pytest`` alone, ``-n 0``) nothing changes but the order: the files of ``integration`` tests
(the long ones: real servers, waits of tens of seconds) run first, so that the short ones fill the workers' last
minutes instead of one worker waiting alone on a long file at the end (xdist hands out files in this order).
"""

from __future__ import annotations

import os
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pytest


def worker_number() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def redis_url_for(url: str, number: int) -> str:
    """``url`` on the Redis database ``number`` below its own."""
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) - number
    if database < 0:
        raise ValueError(f"{url}: no Redis database is left for parallel worker {number}")
    return urlunsplit(parts._replace(path=f"/{database}"))


def amqp_vhost_for(vhost: str, number: int) -> str:
    return f"gw{number}" if vhost == "/" else f"{vhost}-gw{number}"


def amqp_url_for(url: str, number: int) -> str:
    """``url`` on its worker's vhost (``amqp_vhost_for``)."""
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) or "/"
    return urlunsplit(parts._replace(path="/" + quote(amqp_vhost_for(vhost, number), safe="")))


#: The services as given to the run, before a worker's own replaced them.
GIVEN = {name: os.environ.get(name, "") for name in ("CELERY_BROKER_URL", "CACHE_URL", "AMQP_URL")}


def _isolate() -> None:
    number = worker_number()
    if number is None:
        return
    for name in ("CELERY_BROKER_URL", "CACHE_URL"):
        if os.environ.get(name, "").startswith(("redis://", "rediss://")):
            os.environ[name] = redis_url_for(os.environ[name], number)
    if os.environ.get("AMQP_URL", "").startswith("amqp://"):
        os.environ["AMQP_URL"] = amqp_url_for(os.environ["AMQP_URL"], number)


_isolate()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``integration`` tests' files first, each file's tests in their order (a stable sort)."""
    items.sort(key=lambda item: item.get_closest_marker("integration") is None)
