"""`make web`: one command starts nginx in front of gunicorn (once gunicorn listens), serves the API, the admin
and the downloads (their errors as the API's JSON), restarts a gunicorn or an nginx killed with SIGKILL, and
only SIGTERM stops it all: no process it started is left behind. It refuses a media root nginx cannot read."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
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


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def master(launcher: int, name: str) -> int:
    """The pid of the launcher's child ``name`` (gunicorn's or nginx's master)."""
    return next(pid for pid in descendants(launcher) if parent(pid) == launcher and name in command_line(pid))


def killed_and_answering_again(url: str, launcher: int, name: str) -> float:
    """SIGKILL the launcher's ``name``; seconds until another one runs and the tier answers the admin's login
    page again (an nginx master's workers outlive it and answer meanwhile: only a new master counts)."""
    pid = master(launcher, name)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), timeout=5, what="the killed process to be gone")

    def restarted() -> bool:
        try:
            return any(
                other != pid and parent(other) == launcher and name in command_line(other)
                for other in descendants(launcher)
            )
        except OSError:  # one of them exited meanwhile
            return False

    wait_until(restarted, timeout=30, poll=0.1, what=f"make web to start {name} again")

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/admin/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout=30, poll=0.1, what="the tier to answer again")
    return time.monotonic() - killed_at


def test_make_web_serves_everything_heals_killed_parts_and_stops_only_on_sigterm(settings):
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
        # One web process: a restarted gunicorn answers once its worker loaded Django, which takes seconds of CPU;
        # more workers loading at once on the test machine's 2 busy cores only delay the first.
        "WEB_WORKERS": "1",
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
        # A file nginx's workers may not read: the API's JSON error, not nginx's HTML page.
        (stored,) = [path for path in (run_dir / "media").rglob("*") if path.is_file()]
        stored.chmod(0)
        unreadable = httpx.get(url + binary.path, timeout=10)
        stored.chmod(0o644)
        assert unreadable.status_code == 500, unreadable.text
        assert unreadable.headers["content-type"] == "application/json"
        assert unreadable.json()["code"] == "server_error"
        # A crashed part is started again by make web itself (docs/operations.md#the-web-tier).
        launcher = next(pid for pid in started if "demo.web" in command_line(pid))
        healed = {name: killed_and_answering_again(url, launcher, name) for name in ("gunicorn", "nginx")}
        print(f"answering again after kill -9: {healed}")
        assert all(seconds < 10 for seconds in healed.values()), healed
        assert make.poll() is None
        started |= descendants(make.pid)
        make.send_signal(signal.SIGTERM)
        try:
            out, _ = make.communicate(timeout=30)
        except subprocess.TimeoutExpired as timeout:
            # Name what still holds make's output open (it has printed what it printed), to see why.
            holders = {pid: command_line(pid) for pid in started | descendants(make.pid) if alive(pid)}
            pytest.fail(f"make web's output still open 30 s after SIGTERM; alive: {holders}; out: {timeout.output!r}")
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
    text = out.decode(errors="replace")
    assert "web: stopped" in text, text[-2000:]
    assert "web: gunicorn restarted" in text, text[-2000:]
    assert "web: nginx restarted" in text, text[-2000:]
    assert "[crit]" not in text.split("web: gunicorn exited")[0], text[-2000:]  # nginx started once gunicorn listened
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in started if alive(pid)] == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


@pytest.mark.skipif(os.geteuid() != 0, reason="nginx's workers run as this user, who can read what it created")
def test_make_web_refuses_a_media_root_nginx_cannot_read(tmp_path):
    private = Path(tempfile.mkdtemp(prefix="rollout-private-"))  # mode 0700, as `mktemp -d` makes it
    try:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "ROLLOUT_RUN_DIR": str(tmp_path / "run"),
            "ROLLOUT_MEDIA_ROOT": str(private / "media"),
        }
        done = subprocess.run(
            [sys.executable, "-m", "demo.web", "--no-migrate", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert done.returncode != 0
    assert f"nginx's workers run as nobody and cannot enter {private} (mode 0700)" in done.stderr, done.stderr
    assert f"chmod o+x {private}" in done.stderr
    assert "Traceback" not in done.stderr
