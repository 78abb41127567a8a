"""`make demo` on the embedded default (SQLite, the filesystem broker): a small run of the same program."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BASE_DIR = Path(__file__).resolve().parents[2]


def test_the_demo_pauses_at_the_canary_and_rolls_forward_on_the_embedded_default(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # nothing from the test run: SQLite, no Redis
    done = subprocess.run(
        [sys.executable, "-m", "demo", "--fail-canary", "--agents-per-pool", "5", "--run-dir", str(tmp_path)],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "rollout.paused reason=failure_ratio" in out
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
    assert "user admin  password" in out
    assert (tmp_path / "db.sqlite3").exists()
