"""Gates against a real Prometheus (Debian's package), scraping an exporter the test controls.

The test starts Prometheus on 127.0.0.1 and a free port with a 1 s scrape of a tiny exporter
(a real HTTP server serving ``gate_test_errors``), and asks it through the gate's evaluation:
the value goes up, the rollout holds, then pauses; the alert clears, it proceeds after a resume;
Prometheus is stopped, the rollout holds and never pauses.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rollout.models import RolloutEvent, RolloutGate
from rollout.rollouts.actions import rollout_resume
from tests.factories import fleet
from tests.gates.conftest import Server
from tests.gates.test_evaluate import create, evaluate
from tests.rollout.helpers import rejoin, states, tick

pytestmark = pytest.mark.django_db

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
METRIC = "gate_test_errors"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - the test's own local server
            return answer.status, answer.read()
    except OSError:
        return 0, b""


def _until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    """Wait for a condition of a server the test does not drive (Prometheus scrapes on its own clock)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)  # polling an outside process; no state of ours is synchronised by it


class Prometheus:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"

    def value(self) -> float | None:
        status, body = _get(f"{self.url}/api/v1/query?query={METRIC}")
        if status != 200:
            return None
        result = json.loads(body)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture
def exporter(serve) -> Server:
    return serve(content_type="text/plain; version=0.0.4", body=f"{METRIC} 0\n".encode())


@pytest.fixture
def prometheus(exporter: Server, tmp_path: Path, module_settings) -> Iterator[Prometheus]:
    if not Path(PROMETHEUS).exists():
        pytest.fail("Debian's prometheus is missing: `make test` installs it (scripts/system-deps.sh)")
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gate-test\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter.port}']\n"
    )
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",  # loopback only
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Prometheus(process, port)
    try:
        _until(lambda: _get(f"{server.url}/-/ready")[0] == 200, "Prometheus to be ready")
        module_settings.ROLLOUT_PROMETHEUS_URL = server.url
        yield server
    finally:
        server.stop()


def _export(exporter: Server, prometheus: Prometheus, value: float) -> None:
    exporter.body = f"{METRIC} {value}\n".encode()
    _until(lambda: prometheus.value() == value, f"Prometheus to scrape {METRIC} = {value}")


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as the kernel shows them) of the sockets listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, local_port = local.split(":")
            if int(local_port, 16) == port and state == "0A":  # 0A: LISTEN
                found.append(address)
    return found


def test_prometheus_listens_on_loopback_only(prometheus):
    port = int(prometheus.url.rsplit(":", 1)[1])
    assert _listening(port) == ["0100007F"]  # 127.0.0.1, and nothing else (no 0.0.0.0, no ::)


def test_a_rollout_holds_pauses_proceeds_and_outlives_prometheus(tenant, releases, exporter, prometheus):
    nodes = fleet(tenant, {"a": (4, "0.25")})["a"]  # one node at a time
    rollout = create(tenant, {"name": "errors", "prometheus": {"query": METRIC, "max": 5}}, limit=2)
    _export(exporter, prometheus, 0)
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"in_flight": 1, "pending": 3}
    (first,) = rollout.node_upgrades.filter(state="in_flight")
    rejoin(first.node_id, "1.0.0")

    # The value goes up: the rollout holds, then pauses.
    _export(exporter, prometheus, 9)
    evaluate(rollout)
    tick(rollout)
    assert (rollout.state, states(rollout)) == ("active", {"succeeded": 1, "pending": 3})
    gate = RolloutGate.objects.get()
    assert (gate.state, gate.value, gate.consecutive_failures) == ("fail", 9.0, 1)
    evaluate(rollout)
    tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "gate_failed:errors")
    assert RolloutEvent.objects.filter(kind="rollout.gate_failed").last().data["value"] == 9.0

    # The alert clears: it proceeds after a resume.
    _export(exporter, prometheus, 1)
    rollout_resume(rollout_id=rollout.id)
    tick(rollout)
    assert (rollout.state, states(rollout)) == ("active", {"succeeded": 1, "pending": 3})  # the last result: fail
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"succeeded": 1, "in_flight": 1, "pending": 2}
    (second,) = rollout.node_upgrades.filter(state="in_flight")
    rejoin(second.node_id, "1.0.0")

    # Prometheus is stopped: the rollout holds and never pauses.
    prometheus.stop()
    for _ in range(4):
        evaluate(rollout)
        tick(rollout)
    assert (rollout.state, states(rollout)) == ("active", {"succeeded": 2, "pending": 2})
    gate.refresh_from_db()
    assert (gate.state, gate.consecutive_failures) == ("inconclusive", 0)
    assert len(nodes) == 4


def test_on_failure_abort_rollback_sends_nodes_back_on_a_real_prometheus(tenant, releases, exporter, prometheus):
    from fleet.models import Node

    fleet(tenant, {"a": (4, "0.5")})  # two nodes at a time
    gate = {"name": "errors", "prometheus": {"query": METRIC, "max": 5}, "onFailure": "abort_rollback"}
    rollout = create(tenant, gate, limit=2)
    _export(exporter, prometheus, 0)
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"in_flight": 2, "pending": 2}
    first, second = rollout.node_upgrades.filter(state="in_flight").order_by("position")
    rejoin(first.node_id, "1.0.0")

    _export(exporter, prometheus, 9)
    evaluate(rollout)
    tick(rollout)
    assert rollout.state == "active"
    evaluate(rollout)
    tick(rollout)
    assert (rollout.state, rollout.aborted_reason) == ("aborted", "gate_failed:errors")
    # The confirmed node stays; the one in flight goes back; the rest are cancelled.
    assert states(rollout) == {"succeeded": 1, "rolled_back": 1, "cancelled": 2}
    assert Node.objects.get(pk=second.node_id).spec["daemon"]["version"] == "0.9.0"
    failed = RolloutEvent.objects.filter(kind="rollout.gate_failed").last().data
    assert (failed["gate"], failed["action"], failed["value"]) == ("errors", "abort_rollback", 9.0)
