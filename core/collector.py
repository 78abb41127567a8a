"""Python's cyclic garbage collector in a long-running server process (docs/operations.md#garbage-collection).

By default CPython collects its youngest generation every 700 allocations (net of frees) and promotes what
survives two such collections towards the oldest generation, which a full collection walks whole, the
process's every module, class and function included. A web process of this tier holds objects that live for
seconds (a held request, its coroutine and futures; what it remembers per agent: fleet/watch/known.py), so at
a fleet's pace they were promoted by the thousand and full collections came every 20 s or so, each walking every
object the process holds: about a third of the web tier's time during a 10,000-agent rollout, by the
collections' own clock (docs/benchmarks.md). So, once the process has loaded its application:

- what it loaded is frozen (``gc.freeze``): never collected, and never walked again by a collection;
- the youngest generation is collected every ``YOUNG_THRESHOLD`` allocations: an object that lives less than a
  request's few milliseconds to a few seconds is freed by its reference count before any collection sees it,
  instead of being promoted towards the collections that walk everything.

Memory held by unreachable cycles is freed later than by default, bounded by the same count.
"""

from __future__ import annotations

import gc

#: Allocations (net of frees) between two collections of the youngest generation (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


def tune_for_serving() -> None:
    """Called once the process has loaded what it serves (gunicorn's ``post_worker_init``): collect what loading
    left behind, freeze the rest, and collect the young less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
