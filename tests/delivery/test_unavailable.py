"""nginx in front of a gunicorn that is not there (down, or starting): the API's 503 ``unavailable`` with
``Retry-After: 2``, so that a fleet whose web tier restarts tries again within seconds (docs/fleet.md#retries)."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

from demo.processes import free_port, wait_until
from demo.web import nginx_binary, render_nginx_conf
from tests.delivery.conftest import world_readable_dir

pytestmark = pytest.mark.integration


def test_a_gunicorn_that_is_down_answers_503_unavailable_with_retry_after():
    run_dir = world_readable_dir("rollout-unavailable-")
    (run_dir / "nginx").mkdir()
    port = free_port()
    config = run_dir / "nginx" / "nginx.conf"
    values = {
        "NGINX_LISTEN": f"127.0.0.1:{port}",
        "NGINX_RUN_DIR": str(run_dir / "nginx"),
        "NGINX_ACCESS_LOG": "/dev/null",
        "ROLLOUT_MEDIA_ROOT": str(run_dir),
        "APP_UPSTREAM": f"unix:{run_dir}/gunicorn.sock",  # nothing listens there
        "AGENT_SERVERS": f"server unix:{run_dir}/worker-0.sock; server unix:{run_dir}/worker-1.sock;",  # nor there
    }
    config.write_text(render_nginx_conf(values))
    nginx = subprocess.Popen(
        [nginx_binary(), "-p", str(run_dir / "nginx"), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/compute/health/", timeout=2).status_code > 0
            except httpx.HTTPError:
                return False

        wait_until(answers, timeout=20, what="nginx to listen")
        for method, path in (("POST", "/api/compute/agent/session"), ("GET", "/api/compute/rollouts/")):
            answer = httpx.request(method, f"http://127.0.0.1:{port}{path}", json={}, timeout=5)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["retry-after"] == "2", (path, answer.headers)
            assert answer.json()["code"] == "unavailable"
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        shutil.rmtree(run_dir, ignore_errors=True)
