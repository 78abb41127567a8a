"""A web worker tunes the garbage collector once its application is loaded (core/collector.py)."""

import json
import subprocess
import sys
from pathlib import Path

from core.collector import YOUNG_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]

# gunicorn calls post_worker_init(worker) in each worker once the application is loaded: run it as gunicorn would,
# in a process of its own (the collector's state is the process's), after loading the project's modules.
HOOK = """
import gc, json, runpy
import django.db.models  # something loaded, to be frozen
before = gc.get_threshold()
runpy.run_path("gunicorn.conf.py")["post_worker_init"](None)
after, frozen, enabled = gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()
print(json.dumps({"before": before, "after": after, "frozen": frozen, "enabled": enabled}))
"""


def test_a_worker_freezes_what_it_loaded_and_collects_the_young_less_often():
    done = subprocess.run([sys.executable, "-c", HOOK], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["before"] == [700, 10, 10]  # CPython's defaults, untouched until the hook
    assert state["after"] == [YOUNG_THRESHOLD, 10, 10]
    assert state["frozen"] > 10_000  # the modules, classes and functions loaded: never walked again
    assert state["enabled"]  # tuned, not turned off
