"""Private brokers for tests that stop and start them: a redis-server and a RabbitMQ node, each on free ports.

Never the machine's shared Redis (6379) or RabbitMQ (5672): other test runs use them. ``stop()`` then
``start()`` is a broker outage; both come back empty (Redis keeps nothing, RabbitMQ starts on a fresh
data directory), as in docs/operations.md#broker-loss.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import redis

from demo.processes import free_port, wait_until

RABBITMQ_SERVER = Path(os.environ.get("RABBITMQ_SERVER", "/usr/lib/rabbitmq/bin/rabbitmq-server"))
BROKERS = ("redis", "rabbitmq")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


class PrivateRedis:
    """A throwaway redis-server on its own port, no persistence: a restart loses every queued message."""

    name = "redis"

    def __init__(self, root: Path):
        self.port = free_port()
        self.log = root / "redis.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    running = ping

    def start(self) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (make test installs and starts it)")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self.ping, timeout=15, what="the private redis-server")

    def stop(self) -> None:
        """Killed (SIGKILL): its clients see their connections reset."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


class PrivateRabbitMQ:
    """A RabbitMQ node of its own: node name, AMQP and distribution ports, config, data and log folders.

    It shares nothing with the machine's RabbitMQ (not even /etc/rabbitmq: its own empty config and
    env files) but the Erlang port mapper. Each start uses a fresh data folder: it comes back empty,
    with only the default vhost and the guest user (loopback only).
    """

    name = "rabbitmq"

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"rollout-test-{self.port}@localhost"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None and _accepts(self.port)

    def start(self) -> None:
        if not RABBITMQ_SERVER.exists():
            raise RuntimeError(f"{RABBITMQ_SERVER} is missing: install rabbitmq-server (make test does)")
        self.starts += 1
        data = self.root / f"data-{self.starts}"
        data.mkdir(parents=True)
        for name in ("rabbitmq-env.conf", "rabbitmq.conf"):
            (data / name).touch()
        (data / "enabled_plugins").write_text("[].\n")
        env = {
            **os.environ,
            "HOME": str(self.root),  # its own Erlang cookie
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONF_ENV_FILE": str(data / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(data / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(data / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(data / "mnesia"),
            "RABBITMQ_LOG_BASE": str(data / "log"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.process = subprocess.Popen(
            [str(RABBITMQ_SERVER)],
            env=env,
            stdout=(self.root / "rabbitmq.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self.running, timeout=90, poll=0.2, what="the private RabbitMQ node")

    def stop(self) -> None:
        """Stopped (SIGTERM: the node closes every connection, as a restart does), its processes all gone."""
        if self.process is None:
            return
        group = self.process.pid  # the launcher script and the Erlang VM under it
        if _group_alive(group):
            os.killpg(group, signal.SIGTERM)
            launcher = self.process
            try:  # reaping the launcher as it goes: a zombie would keep the group alive
                wait_until(
                    lambda: launcher.poll() is not None and not _group_alive(group),
                    timeout=60,
                    what="the RabbitMQ node to stop",
                )
            except TimeoutError:
                os.killpg(group, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


def private_broker(name: str, root: Path) -> PrivateRedis | PrivateRabbitMQ:
    return PrivateRedis(root) if name == "redis" else PrivateRabbitMQ(root)
