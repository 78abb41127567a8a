"""nginx in front of a gunicorn that is not there (down, or starting): the API's 503 ``unavailable`` with
``Retry-After: 2``, so that a fleet whose web tier restarts tries again within seconds (docs/fleet.md#retries), and
is answered as soon as gunicorn listens again (nginx never holds the workers' sockets for failed)."""

from __future__ import annotations

import http.server
import shutil
import socketserver
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from demo.processes import free_port, wait_until
from demo.web import nginx_binary, render_nginx_conf, upstreams
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
        **upstreams(run_dir, workers=2)[0].values,  # gunicorn's socket and its workers': nothing listens there
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
        # gunicorn back: its workers' sockets answer the agents at once, not after nginx's 10 s for a failed server.
        servers = [stand_in(run_dir / f"worker-{slot}.sock") for slot in range(2)]
        try:
            answer = httpx.post(f"http://127.0.0.1:{port}/api/compute/agent/session", json={}, timeout=5)
            assert answer.status_code == 200, answer.text
            assert answer.text == "stand-in"
        finally:
            for server in servers:
                server.shutdown()
                server.server_close()
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        shutil.rmtree(run_dir, ignore_errors=True)


class StandIn(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"stand-in")

    def log_message(self, format: str, *args: object) -> None:  # a unix socket's peer has no address to log
        pass


def stand_in(path: Path) -> socketserver.UnixStreamServer:
    """A server answering 200 on the unix socket at ``path``, in a thread, as a gunicorn worker back would."""
    server = socketserver.ThreadingUnixStreamServer(str(path), StandIn)
    path.chmod(0o777)  # nginx's workers (nobody, when the tests run as root) connect to it
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
