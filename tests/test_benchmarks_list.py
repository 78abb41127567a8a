"""`make bench` loads every benchmark's module before any of them sets Django up: none may need it at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import BENCHMARKS

BASE_DIR = Path(__file__).resolve().parent.parent


def test_every_benchmark_loads_without_django_set_up():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    listed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--list"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert names == list(BENCHMARKS)
    assert "not available" not in listed.stdout
