"""Running code at the same moment in several threads, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def run_together(*targets: Callable[[], object], rounds: int = 1) -> list[BaseException]:
    """Run each callable in its own thread, released together by a barrier, ``rounds`` times.

    Returns the exceptions raised (the caller asserts there were none, or which).
    """
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def runner(target: Callable[[], object]) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=30)
                target()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors
