"""A fleet running on its own event loop in a background thread, for synchronous callers (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.fleet import Fleet


class FleetThread:
    """A fleet running in a daemon thread; a context manager that stops it on exit."""

    def __init__(self, fleet: Fleet, *, timeout: float | None = None):
        self.fleet = fleet
        self.error: BaseException | None = None
        self._timeout = timeout
        self._thread = threading.Thread(target=self._main, name="simulated-agents", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self.fleet.run(timeout=self._timeout))
        except BaseException as exc:
            self.error = exc
            self.fleet.finished.set()

    def start(self) -> FleetThread:
        self._thread.start()
        return self

    def wait_for(self, predicate: Callable[[Fleet], bool], timeout: float, *, poll: float = 0.05) -> bool:
        """Poll ``predicate(fleet)`` from this thread until it holds (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError("the simulated fleet crashed") from self.error
            if predicate(self.fleet):
                return True
            if time.monotonic() >= deadline or self.fleet.finished.is_set():
                return predicate(self.fleet)
            time.sleep(poll)

    def stop(self, timeout: float = 15.0) -> None:
        self.fleet.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the simulated fleet did not stop in time")
        if self.error is not None:
            raise RuntimeError("the simulated fleet crashed") from self.error

    def __enter__(self) -> FleetThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
