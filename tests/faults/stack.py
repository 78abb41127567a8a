"""The private system a fault test breaks (tests/faults/conftest.py starts it): a throwaway PostgreSQL
cluster, the stack of processes on it (gunicorn, Celery worker(s) and beat(s) from demo/processes.py) and
docker-compose.yml's restart policy for worker and beat.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from demo.processes import BASE_DIR, celery_beat, celery_worker, wait_until, web_server
from tests.brokers import PrivateRabbitMQ, PrivateRedis
from tests.integration.conftest import Stack

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
# Agents are online within 3 x this (6 s): short enough for an outage to outlast it.
HEARTBEAT_SECONDS = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_postgres(args: list[str]) -> list[str]:
    """initdb and pg_ctl refuse to run as root: run them as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def run_command(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    result = subprocess.run(args, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])}… exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb into a temp folder, its own port and socket folder)."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.log = root / "postgres.log"

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _ctl(self, *args: str) -> None:
        run_command(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]), timeout=60)

    def init(self) -> None:
        run_command(
            _as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"])
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._ctl("-o", options, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def connect(self, name: str = "postgres", *, timeout: int = 2) -> psycopg.Connection:
        return psycopg.connect(self.url(name), autocommit=True, connect_timeout=timeout)

    def create_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')


@dataclass
class FaultStack(Stack):
    """Stack (tests/integration/conftest.py: enroll over HTTP) on private services, with its processes."""

    env: dict[str, str] = field(default_factory=dict)
    db_url: str = ""
    broker: PrivateRedis | PrivateRabbitMQ | None = None
    postgres: PrivatePostgres | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    restarts: list[str] = field(default_factory=list)  # processes the restart policy started again, this test
    _ready_offsets: dict[str, int] = field(default_factory=dict)

    def register(self, version: str, sequence: int) -> None:
        raise NotImplementedError("releases are seeded by tests/faults/seed.py before the server starts")

    def start_worker(self, name: str = "worker", *, concurrency: int = 2, ready: bool = True) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        offset = log.stat().st_size if log.exists() else 0
        env = {**self.env, "PGAPPNAME": f"faults-{name}"}
        process = celery_worker(env, concurrency=concurrency, log_path=log, loglevel="INFO", deployed=True)
        self.processes[name] = process
        self._ready_offsets[name] = offset
        if ready:
            self.wait_worker_ready(name)
        return process

    def wait_worker_ready(self, name: str) -> None:
        log, offset = self.logs / f"{name}.log", self._ready_offsets[name]
        wait_until(lambda: b" ready." in log.read_bytes()[offset:], timeout=90, what=f"{name} to be ready")

    def start_beat(self, name: str = "beat", *, loglevel: str = "WARNING") -> subprocess.Popen:
        self.processes[name] = celery_beat(
            {**self.env, "PGAPPNAME": f"faults-{name}"}, log_path=self.logs / f"{name}.log", loglevel=loglevel
        )
        return self.processes[name]

    def start_web(self, *, ready: bool = True) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        self.processes["web"] = web_server(
            {**self.env, "PGAPPNAME": "faults-web"}, port=port, workers=2, threads=8, log_path=self.logs / "web.log"
        )
        if ready:
            wait_until(self.web_ready, timeout=90, what="gunicorn to answer")

    def web_ready(self) -> bool:
        try:
            return self.client.get("/api/compute/releases/", timeout=2).status_code < 500
        except httpx.HTTPError:
            return False

    def kill(self, name: str) -> None:
        """SIGKILL the process group: no warm shutdown, no ack, no cleanup."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.db_url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def create(self, **body: Any) -> str:
        response = self.client.post("/api/compute/rollouts/", json=body)
        assert response.status_code == 201, response.text
        return response.json()["id"]


RELEASES = (("0.9.0", 1), ("1.0.0", 2))
CORE = ("web", "worker", "beat")


class RestartPolicy(threading.Thread):
    """docker-compose.yml's ``restart: unless-stopped`` for worker and beat: one that exits on its own is started
    again (a test's deliberate SIGKILL removes the process from the stack first, so it is not restarted here).

    A safety net, so that one process's crash does not fail every later test: each restart is reported and
    listed in ``stack.restarts``, and a test about a fault the processes must live through (the broker's
    outage) fails when the list is not empty.
    """

    def __init__(self, stack: FaultStack):
        super().__init__(name="restart-policy", daemon=True)
        self.stack = stack
        self.restarts: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            for name in ("worker", "beat"):
                process = self.stack.processes.get(name)
                if process is not None and process.poll() is not None:
                    self.restarts.append(name)
                    self.stack.restarts.append(name)
                    print(f"[faults] {name} exited by itself (code {process.returncode}): restarted, as compose would")
                    {"worker": self.stack.start_worker, "beat": self.stack.start_beat}[name](
                        **({"ready": False} if name == "worker" else {})
                    )

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
