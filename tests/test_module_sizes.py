"""Every Python module is at most 400 lines (migrations aside: Django writes them), so that a module can be read
whole. A module that grows past it is split along its rules (one rule, one module), never mid-rule for size."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def tracked_modules() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "*.py"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout
    return [path for path in listed.split("\0") if path and "/migrations/" not in f"/{path}"]


def test_every_module_is_under_the_limit():
    modules = tracked_modules()
    assert "fleet/services/sessions.py" in modules  # the listing works (a checkout with its git metadata)
    sizes = {path: len((ROOT / path).read_text(encoding="utf-8").splitlines()) for path in modules}
    over = {path: lines for path, lines in sorted(sizes.items()) if lines > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines: split them along their rules"
