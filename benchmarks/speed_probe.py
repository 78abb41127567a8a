"""How fast the machine runs Python at each moment of a run: the same small piece of work, timed in CPU four
times a second by a process of its own.

fleet10k's ratio divides the CPU an upgrade cost gunicorn during the rollout by the CPU a heartbeat cost it in
the loop a minute or two before. These machines do not run at one speed: on an idle machine the same work
takes 1.4 ms of CPU for some seconds and 2.3 ms for the next (docs/benchmarks.md, "the machine's two speeds"),
whichever core it runs on. A 4-second round of the loop can fall in a fast stretch while a three-minute
rollout averages both, and that moves the ratio more than a change to the code. The probe's mean CPU per unit
of work in a window says how fast the machine ran in it, and ``scale`` turns CPU measured in one window into
CPU at another's speed. Its own CPU, about 1 % of a core, is nobody's in the figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
        """The mean CPU seconds of a unit of work between two ``time.monotonic()`` readings (nan: none). The mean,
        not the median: CPU adds up over a window as the mean does, whatever mix of the two speeds it saw."""
        start, end = window
        during = [cpu for at, cpu in list(self._samples) if start <= at <= end]
        return sum(during) / len(during) if during else math.nan

    def scale(self, reference: tuple[float, float]) -> Callable[[tuple[float, float]], float]:
        """The factor that turns CPU measured in a window into CPU at the machine's speed in ``reference``."""
        at_reference = self.cost(reference)
        return lambda window: at_reference / self.cost(window)

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()
