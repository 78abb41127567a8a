"""A Redis that is down or unreachable: a publish gives up within about a second (logged, False) instead of
blocking the web request, and the worker waits for the broker forever (project/settings.py, "Celery").

Each case runs a real Python process whose broker URL points at a closed port (connections refused) or at
a socket whose accept queue is full (connections hang, as to an unreachable host).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Imports are warmed up first: what is measured is the publish alone.
SCRIPT = """
import json, time, django
django.setup()
import kombu.transport.redis
from celery import current_app
from django.conf import settings
from rollout.dispatch import publish
current_app.tasks["rollout/tick"], current_app.amqp.producer_pool
timings = []
for _ in range(2):
    started = time.monotonic()
    result = publish("rollout/tick", args=["00000000-0000-0000-0000-000000000000"])
    timings.append((result, time.monotonic() - started))
names = [name for name in dir(settings) if name.startswith("CELERY_")]
print("RESULT " + json.dumps({"timings": timings, "settings": {n: getattr(settings, n) for n in names}}, default=str))
"""


def run(broker_url: str) -> tuple[dict, str]:
    env = {
        **os.environ,
        "CELERY_BROKER_URL": broker_url,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "PYTHONPATH": str(ROOT),
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), done.stdout + done.stderr


@pytest.fixture
def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


@pytest.fixture
def hanging_port() -> Iterator[int]:
    """A listening socket whose accept queue is full: further connects hang until their timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname())
    try:
        yield server.getsockname()[1]
    finally:
        filler.close()
        server.close()


def test_the_celery_broker_settings(closed_port):
    result, _ = run(f"redis://127.0.0.1:{closed_port}/0")
    conf = result["settings"]
    assert conf["CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP"] is True
    assert conf["CELERY_BROKER_CONNECTION_MAX_RETRIES"] is None  # the worker waits forever
    assert 0 < conf["CELERY_BROKER_CONNECTION_TIMEOUT"] <= 4
    assert conf["CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS"] is True
    assert conf["CELERY_TASK_ACKS_LATE"] is True  # what makes cancelling on connection loss safe
    policy = conf["CELERY_TASK_PUBLISH_RETRY_POLICY"]
    assert policy["max_retries"] <= 1
    assert policy["interval_max"] <= 0.2
    options = conf["CELERY_BROKER_TRANSPORT_OPTIONS"]
    assert options["visibility_timeout"] == 3600
    assert options["socket_connect_timeout"] <= 0.5
    assert 1 < options["socket_timeout"] <= 10  # above the worker's 1 s BRPOP poll
    assert options["retry_on_timeout"] is False
    assert 0 < options["health_check_interval"] <= 60


@pytest.mark.parametrize("broker", ["closed_port", "hanging_port"])
def test_a_publish_to_a_broker_that_is_down_returns_false_within_about_a_second(request, broker):
    port = request.getfixturevalue(broker)
    result, output = run(f"redis://127.0.0.1:{port}/0")
    assert [published for published, _ in result["timings"]] == [False, False]
    assert max(seconds for _, seconds in result["timings"]) < 1.6, result["timings"]
    assert output.count('"event": "task.publish_failed"') == 2
