"""How fast the machine runs Python at each moment of a run: the same small piece of work, timed in CPU four
times a second by a process of its own.

fleet10k's ratio divides the CPU an upgrade cost gunicorn during the rollout by the CPU a heartbeat cost it in
the loop a minute or two before. On a shared machine the same work can take a fifth more CPU from one minute to
the next (a neighbour's load on the caches the cores share), and that moves the ratio as much as a change to
the code. The probe tells how much the machine changed between the two windows: the median CPU of its unit of
work in each (docs/benchmarks.md). Its own CPU, about 2 % of a core, is nobody's in the figures.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A document like an agent's answer: what a unit of work encodes, decodes and sorts.
_DOCUMENT = {
    "nodeId": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    "spec": {"daemon": {"version": "1.1.0", "url": "https://downloads/bcd/1.1.0", "sha256": "0" * 64}},
    "labels": {f"label-{index}": f"value-{index}" for index in range(20)},
}


def work() -> None:
    """One unit of work: about 2 ms of the interpreter on JSON, dicts and strings, as a web process spends it."""
    for _ in range(120):
        json.loads(json.dumps(_DOCUMENT, sort_keys=True))
        sorted(_DOCUMENT["labels"].items(), reverse=True)


def run_probe(every: float) -> None:
    """The probe's process: a unit of work every ``every`` seconds, printed as ``<monotonic time> <CPU s>``."""
    while True:
        start = time.thread_time()
        work()
        print(time.monotonic(), time.thread_time() - start, flush=True)
        time.sleep(every)


class SpeedProbe:
    """The probe's process, from construction to ``stop``, and what it measured."""

    def __init__(self, every: float = 0.25) -> None:
        code = f"from benchmarks.speed_probe import run_probe; run_probe({every})"
        self._process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        self._samples: list[tuple[float, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            at, cpu = map(float, line.split())
            self._samples.append((at, cpu))

    def cost(self, window: tuple[float, float]) -> float:
        """The median CPU seconds of a unit of work between two ``time.monotonic()`` readings (nan: none)."""
        start, end = window
        during = [cpu for at, cpu in list(self._samples) if start <= at <= end]
        return statistics.median(during) if during else math.nan

    def slowdown(self, before: tuple[float, float], during: tuple[float, float]) -> float:
        """How much more CPU the same work took ``during`` than ``before`` (1.2: a fifth more)."""
        return self.cost(during) / self.cost(before)

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()
