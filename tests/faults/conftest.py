"""Faults staged for real (issue 9): every test runs its own PostgreSQL cluster and broker (never the
machine's shared ones, which the tests stop and restart), gunicorn, Celery worker(s) and beat(s) from
demo/processes.py, and simulated agents, then breaks one of them during a live rollout. Every test runs
on both brokers: a private redis-server and a private RabbitMQ node (tests/brokers.py); the worker is
started exactly as docker-compose.yml starts it.

The test process's Django stays bound to pytest-django's database; the private database is seeded by
a child process (tests/faults/seed.py) and watched with plain SQL by a ``Monitor`` thread that polls
it (and survives its outages) while the rollout runs: it checks the disruption budget at every poll.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from demo.processes import BASE_DIR, celery_beat, celery_worker, stop, wait_until, web_server
from fleet.services.budget import budget_allowed
from simulator import Fleet, build_agent_configs
from tests.brokers import BROKERS, PrivateRabbitMQ, PrivateRedis, private_broker
from tests.factories import binary_bytes, manifest, pin, signed
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


def _run(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
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
        _run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]), timeout=60)

    def init(self) -> None:
        _run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"]))

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


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """One private cluster for the session (initdb, then pg_ctl start on a free port)."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"the fault tests need PostgreSQL's initdb/pg_ctl in {PG_BIN} (make test)")
    # A short path: the socket's path must stay under 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="faults-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres")
    cluster = PrivatePostgres(root)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


# --- watching the private database -------------------------------------------------------------------

BUDGET_SQL = """
SELECT p.name, p.disruption_budget, count(n.id) AS nodes,
       count(n.id) FILTER (WHERE
           EXISTS (SELECT 1 FROM fleet_workflow w WHERE w.node_id = n.id AND w.state = 'active')
        OR EXISTS (SELECT 1 FROM rollout_nodeupgrade u WHERE u.node_id = n.id AND u.state = 'in_flight')
        OR EXISTS (SELECT 1 FROM rollout_nodeupgrade u WHERE u.node_id = n.id AND u.state = 'failed'
                   AND NOT EXISTS (SELECT 1 FROM fleet_nodesession s
                                   WHERE s.node_id = n.id AND s.left_at IS NULL AND s.last_seen_at > u.settled_at))
       ) AS disrupted
FROM fleet_pool p JOIN fleet_node n ON n.pool_id = p.id
GROUP BY p.id, p.name, p.disruption_budget
"""
ROLLOUTS_SQL = """
SELECT r.id::text, r.state, u.state, count(u.id), count(u.started_at)
FROM rollout_rollout r LEFT JOIN rollout_nodeupgrade u ON u.rollout_id = r.id
GROUP BY r.id, r.state, u.state
"""


@dataclass
class Poll:
    at: float  # time.monotonic()
    rollouts: dict[str, str]  # id -> state
    counts: dict[str, Counter]  # id -> {node upgrade state: n}
    started: int  # node upgrades ever started (started_at set), all rollouts


class Monitor:
    """Polls the private database every ``interval`` s from a thread; an unreachable database is a failed poll.

    At every poll, each pool's disrupted nodes (CONTRACT 5: an active workflow, an upgrade in flight, or a
    failed upgrade whose node has not been online since) must stay within ceil(budget x nodes).
    """

    def __init__(self, url: str, *, pools: Iterable[str], interval: float = 0.1):
        self.url = url
        self.pools = set(pools)
        self.interval = interval
        self.polls: list[Poll] = []
        self.failed_polls = 0
        self.violations: list[str] = []
        self.peak: dict[str, tuple[int, int]] = {}  # pool -> (most disrupted seen, allowed)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fault-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        wait_until(lambda: bool(self.polls), timeout=30, what="the monitor's first poll")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._halt.set()
        self._thread.join(10)

    def _main(self) -> None:
        conn: psycopg.Connection | None = None
        while not self._halt.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=1)
                self._poll(conn)
            except psycopg.Error:
                self.failed_polls += 1
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
            self._halt.wait(self.interval)
        if conn is not None:
            conn.close()

    def _poll(self, conn: psycopg.Connection) -> None:
        with conn.transaction():  # one snapshot for both reads
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            budgets = conn.execute(BUDGET_SQL).fetchall()
            rows = conn.execute(ROLLOUTS_SQL).fetchall()
        at = time.monotonic()
        for pool, budget, nodes, disrupted in budgets:
            if pool not in self.pools:  # another test's pools, on the shared system
                continue
            allowed = budget_allowed(budget=budget, nodes=nodes)
            most, _ = self.peak.get(pool, (0, allowed))
            self.peak[pool] = (max(most, disrupted), allowed)
            if disrupted > allowed:
                self.violations.append(f"pool {pool}: {disrupted} disrupted > {allowed} allowed")
        rollouts: dict[str, str] = {}
        counts: dict[str, Counter] = {}
        started = 0
        for rollout_id, state, upgrade_state, n, n_started in rows:
            rollouts[rollout_id] = state
            counts.setdefault(rollout_id, Counter())
            if upgrade_state is not None:
                counts[rollout_id][upgrade_state] += n
            started += n_started
        self.polls.append(Poll(at=at, rollouts=rollouts, counts=counts, started=started))

    # -- reading what was seen --------------------------------------------------------------------

    @property
    def last(self) -> Poll:
        return self.polls[-1]

    def state(self, rollout_id: str) -> str | None:
        return self.last.rollouts.get(rollout_id)

    def count(self, rollout_id: str, state: str) -> int:
        return self.last.counts.get(rollout_id, Counter())[state]

    def first(self, predicate: Callable[[Poll], bool], *, after: float) -> float | None:
        """When (monotonic) a poll taken after ``after`` first satisfied ``predicate``."""
        return next((poll.at for poll in self.polls if poll.at >= after and predicate(poll)), None)

    def wait(self, predicate: Callable[[Poll], bool], *, timeout: float, what: str) -> float:
        """Wait for a (fresh) poll satisfying ``predicate``; returns its time."""
        since = time.monotonic()
        wait_until(lambda: self.first(predicate, after=since) is not None, timeout=timeout, what=what)
        return self.first(predicate, after=since)  # type: ignore[return-value]


# --- the stack -----------------------------------------------------------------------------------------


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

    def start_beat(self, name: str = "beat") -> subprocess.Popen:
        self.processes[name] = celery_beat(
            {**self.env, "PGAPPNAME": f"faults-{name}"}, log_path=self.logs / f"{name}.log"
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


@pytest.fixture(scope="session", params=BROKERS)
def fault_broker(request, tmp_path_factory) -> Iterator[PrivateRedis | PrivateRabbitMQ]:
    """The private broker of one run of the fault tests: each test runs once per broker."""
    broker = private_broker(request.param, tmp_path_factory.mktemp(f"faults-{request.param}"))
    try:
        broker.start()
    except RuntimeError as exc:  # not installed: a failure, never a skip
        pytest.fail(str(exc))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def shared_fault_stack(private_postgres, fault_broker, tmp_path_factory) -> Iterator[FaultStack]:
    """One private system per broker for every fault test (starting it costs tens of seconds on a busy
    machine): a database copied from the template, releases 0.9.0 and 1.0.0 with binaries, gunicorn, one
    worker and one beat (every 1 s) on the private broker. Each test enrolls its own pools. Every process
    is killed at the end, whatever happened."""
    root = tmp_path_factory.mktemp("faults-stack")
    name = f"faults_{fault_broker.name}_{uuid.uuid4().hex[:8]}"
    private_postgres.create_database(name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    logs = root / "logs"
    logs.mkdir()
    env = {
        "DATABASE_URL": private_postgres.url(name),
        "CELERY_BROKER_URL": fault_broker.url,
        "CELERY_TASK_DEFAULT_QUEUE": "faults",
        "ROLLOUT_RELEASE_PINS": pin(0),
        "ROLLOUT_DOWNLOADS_URL": f"{url}/api/compute/downloads",
        "ROLLOUT_EVERY": "1",
        "ROLLOUT_MEDIA_ROOT": str(root / "media"),
        "ROLLOUT_RUN_DIR": str(root / "run"),
        "FLEET_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        # The simulated agents beat every 0.5 s (4 per heartbeatSeconds); the limit is enforced all the same.
        "AGENT_TOKEN_RATE": "10/heartbeat",
        "FLEET_MIN_PROTOCOL_VERSION": "2",
        "DATABASE_CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "TEST_DATABASE_NAME": "",
    }
    stack = FaultStack(
        url=url,
        client=httpx.Client(base_url=url, timeout=30),
        logs=logs,
        sequences=dict(RELEASES),
        env=env,
        db_url=private_postgres.url(name),
        broker=fault_broker,
        postgres=private_postgres,
    )
    try:
        # Worker and web start while the database is migrated and seeded: their start-up is the slow part.
        stack.start_worker(ready=False)
        stack.start_web(ready=False)
        seed: dict[str, list] = {"releases": []}
        for version, sequence in RELEASES:
            envelope = root / f"{version}.json"
            envelope.write_bytes(signed(manifest(version, sequence, archs=("amd64",))))
            binary = root / f"bcd-{version}"
            binary.write_bytes(binary_bytes(version))
            seed["releases"].append({"envelope": str(envelope), "binaries": {"linux-amd64": str(binary)}})
        (root / "seed.json").write_text(json.dumps(seed))
        out = _run([sys.executable, "-m", "tests.faults.seed", str(root / "seed.json")], env={**os.environ, **env})
        stack.client.headers["Authorization"] = f"Bearer {json.loads(out.strip().splitlines()[-1])['key']}"
        stack.start_beat()  # its scheduler reads the migrated tables at once
        wait_until(stack.web_ready, timeout=90, what="gunicorn to answer")
        stack.wait_worker_ready("worker")
        yield stack
    finally:
        stack.client.close()
        stop(*stack.processes.values(), timeout=3)
        for log in sorted(logs.iterdir()):
            text = log.read_text(errors="replace")[-3000:]
            if "Traceback" in text or "ERROR" in text:
                print(f"--- {log.name} (tail) ---\n{text}")


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


@pytest.fixture
def fault_stack(shared_fault_stack) -> Iterator[FaultStack]:
    """The shared system, as a test expects it: its services up, web, one worker and one beat running."""
    stack = shared_fault_stack
    stack.restarts.clear()
    if not stack.broker.running():  # type: ignore[union-attr]
        stack.broker.start()  # type: ignore[union-attr]
    if not stack.postgres.running():  # type: ignore[union-attr]
        stack.postgres.start()  # type: ignore[union-attr]
    for name in CORE:
        process = stack.processes.get(name)
        if process is None or process.poll() is not None:
            print(f"[faults] {name} was not running after the previous test: restarted")
            {"web": stack.start_web, "worker": stack.start_worker, "beat": stack.start_beat}[name]()
    policy = RestartPolicy(stack)
    policy.start()
    try:
        yield stack
    finally:
        policy.stop()
    # Extra processes a test started (a second beat, a second worker) end with it.
    extra = [name for name in stack.processes if name not in CORE]
    stop(*(stack.processes.pop(name) for name in extra), timeout=3)


# --- helpers shared by the scenarios ---------------------------------------------------------------------


def errors_seen(running: Any) -> Counter:
    """A copy of the simulated fleet's error counts, taken from another thread than the fleet's."""
    for _ in range(20):
        with contextlib.suppress(RuntimeError):  # the fleet's loop changed the Counter while we copied it
            return Counter(dict(running.fleet.stats.errors_by_kind))
    return Counter(dict(running.fleet.stats.errors_by_kind))


def server_errors(errors: Counter) -> Counter:
    """Only the 5xx answers (kinds are "<call>_<status>" or "<call>_<ExceptionName>")."""
    return Counter({kind: n for kind, n in errors.items() if kind.rsplit("_", 1)[-1].startswith("5")})


def hold(seconds: float, *, observed: Callable[[], bool], what: str) -> None:
    """Keep a fault on for ``seconds`` and until clients have observed it (the fault's length is the test's
    choice, not a synchronisation: ``observed`` proves the fault was seen)."""
    until = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= until and observed(), timeout=seconds + 30, what=what)


def assert_rollout_proof(stack: FaultStack, monitor: Monitor, running: Any, rollout_ids: list[str]) -> None:
    """What every scenario proves once its rollouts completed (over the monitor's pools and the fleet's agents)."""
    nodes = len(running.fleet.agents)
    assert monitor.violations == [], monitor.violations[:5]
    assert len(monitor.polls) > 20, "the monitor must have watched the run"
    for rollout_id in rollout_ids:
        assert monitor.state(rollout_id) == "completed"
    # Exactly one succeeded upgrade per node, nothing else: no node started twice, none skipped.
    rows = stack.query(
        "SELECT state, reason, count(*) FROM rollout_nodeupgrade WHERE rollout_id = ANY(%s::uuid[])"
        " GROUP BY state, reason",
        (rollout_ids,),
    )
    assert rows == [("succeeded", None, nodes)], rows
    per_node = stack.query(
        "SELECT n.name, count(u.id) FROM fleet_node n JOIN fleet_pool p ON p.id = n.pool_id"
        " LEFT JOIN rollout_nodeupgrade u ON u.node_id = n.id AND u.state = 'succeeded'"
        " WHERE p.name = ANY(%s) GROUP BY n.name HAVING count(u.id) <> 1",
        (sorted(monitor.pools),),
    )
    assert per_node == [], per_node
    # Every agent restarted into the new binary exactly once (and never into anything else).
    upgrades = Counter(len(agent.upgrades) for agent in running.fleet.agents)
    assert upgrades == {1: nodes}, upgrades
    assert {agent.version for agent in running.fleet.agents} == {"1.0.0"}
    assert running.fleet.stats.refusals == 0


def agents_fleet(stack: FaultStack, pools: dict[str, tuple[int, float]], *, seed: int) -> Fleet:
    """Enroll the pools over HTTP and build their agents on 0.9.0 (heartbeat 0.5 s, restart 0.2 s)."""
    enrolled = stack.enroll(pools)
    agents = build_agent_configs([agent for pool in enrolled.values() for agent in pool], daemon_version="0.9.0")
    return Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=seed)


def pool_id(stack: FaultStack, name: str) -> str:
    return str(stack.query("SELECT id FROM fleet_pool WHERE name = %s", (name,))[0][0])


def report(title: str, **numbers: Any) -> None:
    """Print what a fault did (the numbers docs/operations.md quotes): `pytest -s` or the captured output."""
    print(
        f"\n[faults] {title}: "
        + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in numbers.items())
    )


def create_two_wave_rollout(stack: FaultStack, pools: Iterable[str]) -> str:
    """The scenarios' rollout over ``pools``: a 10 % wave then the rest, short soak, 60 s timeout."""
    return stack.create(
        version="1.0.0",
        poolIds=[pool_id(stack, name) for name in pools],
        waves=[10, 100],
        soakSeconds=1,
        upgradeTimeoutSeconds=60,
        maxFailureRatio=0.1,
    )


def wait_last_wave(monitor: Monitor, rollout: str, *, succeeded: int) -> None:
    """Until the rollout's last wave is under way: ``succeeded`` nodes done (the first wave's and more)."""
    monitor.wait(
        lambda poll: poll.counts.get(rollout, {}).get("succeeded", 0) >= succeeded,
        timeout=90,
        what="the last wave to be under way",
    )
