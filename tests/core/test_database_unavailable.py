"""A database that refuses connections answers 503 ``database_unavailable`` (the API's JSON body), never 500.

A real process whose DATABASE_URL points at a closed port serves requests (Django's test client inside
it, DEBUG off): DRF views (authentication is the first query), a plain view (the downloads) and the
settings that make a restarted database cost no failed request.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client
client = Client(raise_request_exception=False)
answers = {}
for path, headers in [
    ("/api/compute/pools/", {"HTTP_AUTHORIZATION": "Bearer rk_0123456789abcdef"}),
    ("/api/compute/releases/", {"HTTP_AUTHORIZATION": "Bearer rk_0123456789abcdef"}),
    ("/api/compute/agent/session", {"HTTP_AUTHORIZATION": "Bearer at_0123456789abcdef"}),
    ("/api/compute/downloads/bcd/1.0.0/linux-amd64", {}),
]:
    response = client.get(path, **headers)
    answers[path] = [response.status_code, response.json(), response.get("Retry-After")]
db = settings.DATABASES["default"]
print("RESULT " + json.dumps({"answers": answers, "health": db["CONN_HEALTH_CHECKS"], "age": db["CONN_MAX_AGE"]}))
"""


def test_a_database_that_refuses_connections_is_a_503_not_a_500():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/nothing",
        "DATABASE_CONN_MAX_AGE": "60",
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_DEBUG": "false",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for path, (status, body, retry_after) in result["answers"].items():
        assert (status, body["code"]) == (503, "database_unavailable"), (path, status, body)
        assert body["detail"]
        assert retry_after == "5"
    assert "database.unavailable" in done.stdout + done.stderr  # logged
    assert (result["health"], result["age"]) == (True, 60)


HEALTH_SCRIPT = """
import json, django
django.setup()
from django.test import Client
client = Client(raise_request_exception=False)
health = client.get("/api/compute/health")
metrics = client.get("/metrics")
print("RESULT " + json.dumps({
    "health": [health.status_code, health.json(), health.get("Retry-After")],
    "metrics": [metrics.status_code, metrics.content.decode()],
}))
"""


def test_health_and_metrics_with_the_database_unavailable():
    """/api/compute/health: 503 with the same body as when well (docs/operations.md#health); /metrics: 200 with
    rollout_database_up 0 (docs/operations.md#metrics)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/nothing",
        "CELERY_BROKER_URL": "filesystem://",
        "METRICS_PUBLIC": "1",
        "METRICS_TOKEN": "",
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_DEBUG": "false",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # this process's own metrics (an empty value would mean the cwd)
    done = subprocess.run(
        [sys.executable, "-c", HEALTH_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    status, body, retry_after = result["health"]
    assert (status, retry_after) == (503, "5")
    assert body == {"database": "unavailable", "broker": "ok", "controller": {"lastTickAt": None, "healthy": False}}
    status, text = result["metrics"]
    assert status == 200
    assert "rollout_database_up 0.0" in text
    assert "rollout_tick_seconds_count" in text  # the process's own metrics
