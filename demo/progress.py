"""What ``make demo`` prints while a rollout runs: its events as they come, each wave's bar, the pools' budgets
(redrawn in place on a terminal, a status line now and then otherwise), and a summary at the end."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Django is set up in demo/__main__.py's main(), after the environment is chosen
    from rollout.rollouts.reads import WaveStats

COLOURS = {"succeeded": "32", "failed": "31", "inFlight": "33", "pending": "90", "skipped": "35"}
TTY = sys.stdout.isatty()


def say(text: str) -> None:
    print(f"  {text}", flush=True)


def _bar(wave: WaveStats, width: int = 40) -> str:
    total = wave.total or 1
    segments = (
        ("succeeded", "█", wave.succeeded),
        ("failed", "█", wave.failed),
        ("inFlight", "▒", wave.in_flight),
        ("skipped", "░", wave.skipped + wave.cancelled + wave.rolled_back),
    )
    cells = []
    used = 0
    for key, char, count in segments:
        n = round(count * width / total)
        used += n
        cells.append(f"\033[{COLOURS[key]}m{char * n}\033[0m" if TTY else char * n)
    return "".join(cells) + "·" * max(0, width - used)


class Progress:
    def __init__(self, rollout_id: str):
        self.rollout_id = rollout_id
        self.seen_events: set[int] = set()  # ids: an offset would repeat a line if an event sorts in earlier
        self.started = time.monotonic()
        self.lines_drawn = 0
        self.last_printed = -10.0

    def show(self, *, final: bool = False) -> str:
        from fleet.services.budget import pool_budgets
        from rollout.models import Rollout, RolloutEvent
        from rollout.rollouts.reads import rollout_waves

        rollout = Rollout.objects.select_related("release").prefetch_related("pools").get(pk=self.rollout_id)
        new = RolloutEvent.objects.filter(rollout=rollout).exclude(id__in=self.seen_events)
        events = list(new.order_by("at", "id"))
        self.seen_events.update(event.id for event in events)
        waves = rollout_waves([rollout])[rollout.id]
        pools = {p.id: p.name for p in rollout.pools.all()}
        budgets = pool_budgets(pool_ids=list(pools))
        elapsed = time.monotonic() - self.started
        budget = "  ".join(f"{pools[pid]} {b.disrupted}/{b.allowed}" for pid, b in sorted(budgets.items(), key=str))
        if TTY and self.lines_drawn:
            print(f"\033[{self.lines_drawn}F\033[J", end="")
        for event in events:
            data = ", ".join(f"{k}={v}" for k, v in event.data.items() if k not in {"poolIds"})
            print(
                f"  {event.at:%H:%M:%S} \033[1m{event.kind}\033[0m {data}"
                if TTY
                else f"  {event.at:%H:%M:%S} {event.kind} {data}"
            )
        block = [f"  bcd {rollout.release.version}  {rollout.state:<9} wave {rollout.current_wave + 1}/{len(waves)}"
                 f"  {elapsed:5.1f} s   in flight / budget: {budget}"]  # fmt: skip
        for wave in waves:
            done = wave.succeeded + wave.failed + wave.skipped + wave.cancelled + wave.rolled_back
            block.append(
                f"    wave {wave.index} {wave.percent:>3}% {_bar(wave)} {done:>3}/{wave.total:<3}"
                f" ok {wave.succeeded:<3} failed {wave.failed:<2} in flight {wave.in_flight:<2}"
                f" skipped {wave.skipped}"
            )
        if TTY:
            print("\n".join(block), flush=True)
            self.lines_drawn = len(block)
        elif final or events or elapsed - self.last_printed >= 3:
            # Not a terminal (CI, a log): a status line now and then instead of redrawing.
            summary = "  ".join(f"w{w.index}:{w.succeeded}/{w.total}" for w in waves)
            print(
                f"  [{elapsed:5.1f} s] {rollout.state} wave {rollout.current_wave} {summary}  budget {budget}",
                flush=True,
            )
            self.last_printed = elapsed
        if final:
            self.lines_drawn = 0
        return rollout.state


def summary(rollout_ids: list[str]) -> None:
    from rollout.models import NodeUpgrade, Rollout

    print(
        "\n  rollout                               version  state      succeeded failed skipped rolled back cancelled"
    )
    for rollout_id in rollout_ids:
        rollout = Rollout.objects.select_related("release").get(pk=rollout_id)
        counts = {s: NodeUpgrade.objects.filter(rollout=rollout, state=s).count() for s in NodeUpgrade.State.values}
        ended = rollout.completed_at or rollout.aborted_at
        took = (ended - rollout.created_at).total_seconds() if ended else 0
        print(
            f"  {rollout.id}  {rollout.release.version:<8} {rollout.state:<10} {counts['succeeded']:>9} "
            f"{counts['failed']:>6} {counts['skipped']:>7} {counts['rolled_back']:>11} {counts['cancelled']:>9}"
            f"   ({took:.1f} s)"
        )
