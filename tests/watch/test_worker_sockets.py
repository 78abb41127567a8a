"""Each gunicorn worker's own socket (core/worker_sockets.py): one slot per worker, kept by the master, taken again by
the worker that replaces one killed, removed when gunicorn stops. nginx hashing agents over them is
tests/delivery/test_held_sessions.py's."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from core.worker_sockets import least_used_slot, slot_addresses
from demo.processes import free_port, stop, wait_until, web_server
from tests.watch.conftest import THREADS, answering, web_env


def test_slot_addresses_number_a_unix_path_or_count_up_from_a_port():
    assert slot_addresses("unix:/run/web/worker-{slot}.sock", 3) == [
        "unix:/run/web/worker-0.sock",
        "unix:/run/web/worker-1.sock",
        "unix:/run/web/worker-2.sock",
    ]
    assert slot_addresses("0.0.0.0:8001", 2) == ["0.0.0.0:8001", "0.0.0.0:8002"]


@pytest.mark.parametrize("bind", ["unix:/run/web/worker.sock", "8001", "web:", ":8001"])
def test_a_bind_that_cannot_name_one_socket_per_worker_is_refused(bind):
    with pytest.raises(ValueError, match="WEB_WORKER_BIND"):
        slot_addresses(bind, 3)


def test_a_new_worker_takes_the_slot_the_fewest_live_workers_serve():
    assert least_used_slot([], 3) == 0
    assert least_used_slot([0, 2], 3) == 1  # the killed worker's slot
    assert least_used_slot([0, 1, 2], 3) == 0  # a reload's new workers: shared for a moment, lowest first
    assert least_used_slot([0, 1, 2, 0], 3) == 1


def listening_inode(path: Path) -> int | None:
    """The inode of the unix socket listening at ``path`` (/proc/net/unix), if any."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[7] == str(path) and fields[5] == "01":  # 01: listening
            return int(fields[6])
    return None


def holders(inode: int, pids: list[int]) -> set[int]:
    """Which of ``pids`` hold the socket ``inode`` open."""
    held = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if f"socket:[{inode}]" in links:
            held.add(pid)
    return held


def workers_of(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(pid) for pid in children]


def slot_workers(master: int, paths: list[Path]) -> list[set[int]] | None:
    """Per slot, the workers (not the master) holding its socket; None while a socket is not listening or the master
    does not hold it."""
    found = []
    for path in paths:
        inode = listening_inode(path)
        if inode is None:
            return None
        pids = holders(inode, [master, *workers_of(master)])
        if master not in pids:
            return None
        found.append(pids - {master})
    return found


def answers_over(path: Path) -> bool:
    """Whether the web process serving the unix socket at ``path`` answers (the API's 401 without a key)."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=5) as client:
        return client.get("http://127.0.0.1/api/compute/pools/").status_code == 401


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_each_worker_serves_its_own_socket_and_a_dead_ones_replacement_takes_its_slot(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    env = web_env(tmp_path, heartbeat_seconds=10, WEB_WORKER_BIND=f"unix:{run}/worker-{{slot}}.sock")
    port = free_port()
    process = web_server(env, port=port, workers=2, threads=THREADS, log_path=tmp_path / "web.log")
    paths = [run / "worker-0.sock", run / "worker-1.sock"]
    try:
        wait_until(lambda: answering(f"http://127.0.0.1:{port}"), timeout=60, what="the web tier")

        def one_worker_each() -> bool:
            found = slot_workers(process.pid, paths)
            return found is not None and all(len(pids) == 1 for pids in found) and found[0] != found[1]

        wait_until(one_worker_each, timeout=30, what="one worker holding each slot's socket")

        def replaced(slot: int, signum: signal.Signals) -> list[set[int]]:
            """Signal the worker of ``slot``; once another worker holds that slot's socket, what each slot holds."""
            (ended,) = slot_workers(process.pid, paths)[slot]
            os.kill(ended, signum)
            wait_until(
                lambda: one_worker_each() and slot_workers(process.pid, paths)[slot] != {ended},
                timeout=30,
                what=f"a new worker holding slot {slot} after {signum.name}",
            )
            return slot_workers(process.pid, paths)

        before = slot_workers(process.pid, paths)
        after = replaced(1, signal.SIGKILL)
        assert after[0] == before[0]  # the other slot kept its worker
        assert all(answers_over(path) for path in paths)
        # A worker that exits by itself (gunicorn's max_requests, a reload) leaves its slot's socket to the master.
        replaced(0, signal.SIGTERM)
        assert all(answers_over(path) for path in paths)
    finally:
        stop(process)
    assert not any(path.exists() for path in paths)  # gunicorn removed its sockets' files as it stopped
