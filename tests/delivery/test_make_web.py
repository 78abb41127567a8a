"""`make web`: one command starts nginx in front of gunicorn, serves the API, the admin and the downloads,
and SIGTERM stops it all: no process it started is left behind."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from demo.processes import free_port, wait_until
from tests.delivery.conftest import database_url, store_release, world_readable_dir
from tests.factories import pin, rollout_settings

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        one = todo.pop()
        try:
            children = Path(f"/proc/{one}/task/{one}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.add(child)
            todo.append(child)
    return found


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def open_files_limit(pid: int) -> int:
    """The soft limit of open files of a running process."""
    line = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "open files" in line)
    return int(line.split()[3])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_make_web_serves_everything_and_stops_cleanly_on_sigterm(settings):
    run_dir = world_readable_dir("rollout-make-web-")
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = run_dir / "media"  # where make web's Django (ROLLOUT_RUN_DIR/media) keeps binaries
    binary = store_release("1.0.0", os.urandom(300_000))
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ROLLOUT_RUN_DIR": str(run_dir),
        "ROLLOUT_RELEASE_PINS": pin(0),
        "WEB_PORT": str(port),
        "LOG_LEVEL": "WARNING",
    }
    env.pop("ROLLOUT_DOWNLOADS_OFFLOAD", None)  # make web's own default: accel
    make = subprocess.Popen(
        ["make", "web", "ARGS=--no-migrate"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    started: set[int] = set()
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/admin/login/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return make.poll() is not None  # stop waiting: it died

        wait_until(up, timeout=60, what="make web to answer")
        assert make.poll() is None
        started = descendants(make.pid)
        names = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() for pid in started}
        assert any(name.endswith("nginx") or name.startswith("nginx") for name in names), names
        # Room for held agent sessions: nginx's workers (worker_rlimit_nofile) and gunicorn's processes
        # (the launcher's hard limit) may open as many files as docs/operations.md#the-web-tier sizes.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limits = {pid: open_files_limit(pid) for pid in started}
        workers = [pid for pid in started if command_line(pid).startswith("nginx: worker")]
        assert workers
        assert all(limits[pid] >= min(hard, 20000) for pid in workers), limits
        assert all(limits[pid] == hard for pid in started if "gunicorn" in command_line(pid)), limits
        assert httpx.get(f"{url}/api/compute/releases/", timeout=5).status_code == 401  # the API, through nginx
        download = httpx.get(url + binary.path, headers={"Range": "bytes=-1000"}, timeout=10)
        assert download.status_code == 206
        assert download.content == binary.data[-1000:]
        assert download.headers["server"] == "nginx"  # nginx moved the bytes (X-Accel-Redirect)
        make.send_signal(signal.SIGTERM)
        out, _ = make.communicate(timeout=30)
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
    text = out.decode(errors="replace")
    assert "web: stopped" in text, text[-2000:]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in started if alive(pid)] == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)
