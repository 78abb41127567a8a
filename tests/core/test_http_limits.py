"""Body limits over real sockets, against gunicorn started as production starts it (demo.processes).

The test client cannot send ``Transfer-Encoding: chunked`` nor announce more bytes than it sends, and
pytest-django's live server (wsgiref) does not decode chunked bodies: gunicorn does both.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings as django_settings

from core.middleware import MAX_BODY_BYTES
from demo.processes import free_port, stop, wait_until, web_server
from tests.databases import database_url
from tests.fleet.conftest import make_node, make_pool

pytestmark = pytest.mark.django_db(transaction=True)

SESSION = "/api/compute/agent/session"
HEARTBEAT = {"daemonVersion": "1.4.0", "protocolVersion": 3}


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[tuple[str, subprocess.Popen]]:
    """The production web tier (gunicorn's uvicorn workers, one process: a killed one would show), test database."""
    env = {
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "ROLLOUT_RUN_DIR": str(tmp_path_factory.mktemp("run")),
        "LOG_LEVEL": "WARNING",
    }
    log = tmp_path_factory.mktemp("logs") / "web.log"
    port = free_port()
    process = web_server(env, port=port, workers=1, threads=4, log_path=log)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{url}/api/compute/pools/", timeout=2).status_code == 401
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, timeout=60, what="gunicorn")
        yield url, process
    finally:
        stop(process)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


@pytest.fixture
def token(tenant) -> str:
    _, plain = make_node(make_pool(tenant, budget="1"), "node-a")
    return plain


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body of ``total`` bytes as a generator: httpx sends it chunked, without Content-Length."""
    sent = 0
    while sent < total:
        yield b"[" * min(size, total - sent)
        sent += size


def heartbeat_ok(client: httpx.Client, token: str) -> None:
    response = client.post(SESSION, json=HEARTBEAT, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert response.json()["heartbeatSeconds"] == 10


def test_a_chunked_5_mib_body_is_413_and_the_server_stays_up(server, token):
    url, process = server
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post(
            SESSION,
            content=chunks(5 * MAX_BODY_BYTES),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert response.request.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in response.request.headers
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "too_large"
        heartbeat_ok(client, token)  # the same connection, the rest of the body skipped
    assert process.poll() is None


def test_a_small_chunked_body_is_read(server, token):
    url, _ = server
    body = json.dumps(HEARTBEAT).encode()
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post(
            SESSION,
            content=iter([body[:10], body[10:]]),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
    assert response.request.headers["Transfer-Encoding"] == "chunked"
    assert response.status_code == 200, response.text


def _complete(received: bytes) -> bool:
    """A whole answer with a Content-Length (the 413 declares its length)."""
    head, separator, body = received.partition(b"\r\n\r\n")
    if not separator:
        return False
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    assert lengths, head
    return len(body) >= int(lengths[0])


def test_a_huge_declared_length_is_413_before_the_body_is_sent(server, token):
    """8 GiB announced, two bytes sent: the answer comes without waiting for (or reading) the rest."""
    url, process = server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(
            (
                f"POST {SESSION} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {8 << 30}\r\n\r\n{{\n"
            ).encode()
        )
        received = b""
        while not _complete(received):
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["code"] == "too_large"
    with httpx.Client(base_url=url, timeout=30) as client:
        heartbeat_ok(client, token)
    assert process.poll() is None


def test_deep_nesting_over_http_is_400(server, token):
    url, _ = server
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post(
            SESSION,
            content=b"[" * 200_000 + b"]" * 200_000,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_json"
        heartbeat_ok(client, token)
