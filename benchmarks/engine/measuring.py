"""Measuring one call: wall time, SQL statements and their time, Celery messages, on-commit time; tables."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    seconds: float
    queries: int = 0
    sql_seconds: float = 0.0
    messages: int = 0
    dropped: int = 0  # messages dispatch.publish did not send (beyond the visibility timeout, broker error)
    commit_hooks_seconds: float = 0.0
    value: Any = None


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)

    def add(self, sample: Sample) -> Sample:
        self.samples.append(sample)
        return sample

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)

    def python_median(self) -> float:
        """Median of each sample's time outside SQL statements and on-commit hooks."""
        return statistics.median(s.seconds - s.sql_seconds - s.commit_hooks_seconds for s in self.samples)

    def spread(self) -> str:
        times = [s.seconds for s in self.samples]
        return f"{min(times):.3f}-{max(times):.3f}" if len(times) > 1 else "-"


@contextmanager
def count_messages() -> Iterator[list[int]]:
    """[published, not published]: the messages ``rollout.dispatch.publish`` sent to the broker, and those it
    dropped (due past the visibility timeout, or the broker refused them).

    Every task the controller sends goes through ``rollout.dispatch.publish`` (called by the on-commit
    hooks of ``publish_on_commit``, which look it up in the module at call time), so it is counted there,
    with its outcome, rather than on a Celery signal that a dropped message never reaches.
    """
    from rollout import dispatch

    counter = [0, 0]
    original = dispatch.publish

    def counting(name: str, **kwargs: Any) -> bool:
        sent = original(name, **kwargs)
        counter[0 if sent else 1] += 1
        return sent

    dispatch.publish = counting
    try:
        yield counter
    finally:
        dispatch.publish = original


@contextmanager
def time_commit_hooks() -> Iterator[list[float]]:
    """Seconds spent running on-commit hooks (here: publishing Celery messages)."""
    from django.db import connection

    spent = [0.0]
    original = connection.run_and_clear_commit_hooks

    def timed() -> None:
        start = time.perf_counter()
        try:
            original()
        finally:
            spent[0] += time.perf_counter() - start

    connection.run_and_clear_commit_hooks = timed
    try:
        yield spent
    finally:
        del connection.run_and_clear_commit_hooks  # back to the class's method


def measure(fn: Callable[[], Any]) -> Sample:
    """Run ``fn`` once: wall seconds, SQL statements and their time, Celery messages and on-commit time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with count_messages() as messages, time_commit_hooks() as hooks, CaptureQueriesContext(connection) as queries:
        start = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - start
    sql_seconds = sum(float(q["time"]) for q in queries.captured_queries)
    return Sample(seconds, len(queries.captured_queries), sql_seconds, messages[0], messages[1], hooks[0], value)


def print_profile(title: str, fn: Callable[[], Any], top: int = 25) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n--- profile: {title} ---")
    print(out.getvalue())


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])
