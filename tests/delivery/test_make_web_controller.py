"""`make web --controller` (docs/operations.md#without-compose-systemd-units): a Celery worker and beat run beside
nginx and gunicorn, supervised alike. The health says the controller ticks; a worker killed with SIGKILL is
started again and the controller is healthy again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from demo.processes import free_port, wait_until
from rollout.schedules import periodic_tick_ensure
from tests.delivery.conftest import database_url, world_readable_dir
from tests.delivery.test_make_web import command_line, descendants, parent
from tests.factories import pin

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/compute/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def child(launcher: int, word: str) -> int | None:
    """The launcher's own child whose command line has ``word`` (celery's ``worker`` or ``beat``)."""
    for pid in descendants(launcher):
        try:
            if parent(pid) == launcher and f" {word} " in command_line(pid) + " ":
                return pid
        except OSError:
            continue
    return None


def test_make_web_runs_and_restarts_a_worker_and_beat(tmp_path):
    periodic_tick_ensure(every=1, reset=True)  # the stored schedule the beat runs (a flushed test database)
    run_dir = world_readable_dir("rollout-make-web-controller-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ROLLOUT_RUN_DIR": str(run_dir),
        "ROLLOUT_RELEASE_PINS": pin(0),
        "ROLLOUT_EVERY": "1",
        "CELERY_TASK_DEFAULT_QUEUE": f"make-web-{uuid.uuid4().hex[:8]}",
        "LOG_LEVEL": "WARNING",
        "WEB_WORKERS": "1",
    }
    log = tmp_path / "make-web.log"
    with log.open("wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "demo.web", "--no-migrate", "--controller", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: healthy(url), timeout=120, what="the controller make web runs to tick")
        worker = child(launcher.pid, "worker")
        assert worker is not None
        assert child(launcher.pid, "beat") is not None
        os.kill(worker, signal.SIGKILL)
        wait_until(lambda: child(launcher.pid, "worker") not in (None, worker), timeout=30, what="the worker restarted")
        assert "web: worker restarted" in log.read_text()
        wait_until(lambda: healthy(url), timeout=120, what="a healthy controller again")
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)
    assert "web: stopped" in log.read_text()
