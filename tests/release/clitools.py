"""Helpers to run ``python -m rollout.release`` as a subprocess, as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO", "DATABASE"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "rollout.release", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or ROOT,
        timeout=60,
        check=False,
    )


def ok(*args: str | Path) -> subprocess.CompletedProcess[str]:
    result = run(*args)
    assert result.returncode == 0, result.stderr
    return result


def refused(*args: str | Path) -> str:
    """Run, expect exit status 1 with one ``error:`` line and no traceback; return stderr."""
    result = run(*args)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines()[-1].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def pin(work: Path, name: str) -> str:
    return (work / f"{name}.pin").read_text()


def sign_new(work: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(
        "sign",
        "--key",
        work / "a.pem",
        "--version",
        "1.4.0",
        "--sequence",
        "7",
        "--binary",
        f"linux-amd64={work / 'bcd-amd64'}",
        "--binary",
        f"linux-arm64={work / 'bcd-arm64'}",
        "--protocol-version",
        "3",
        "--notes",
        "first",
        "--out",
        out,
        *extra,
    )
