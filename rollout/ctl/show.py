"""What the command line prints: the API's JSON (``--output json``), or ``rich`` tables and progress bars.

Every renderer takes the API's own JSON (camelCase, as docs/api.md shows it) and nothing else.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from rollout.ctl.client import ApiError

EMPTY: Mapping[str, str] = {}
PIPE_WIDTH = 120
ID_WIDTH = 36  # a UUID, never cut: it is what the next command takes
#: A node that settled: its upgrade ended. Cancelled nodes never started (denied, aborted): not settled.
SETTLED = ("succeeded", "failed", "skipped", "rolledBack")
#: The columns of a wave, as the API counts its nodes: (field, heading).
COUNTS = (
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("inFlight", "in flight"),
    ("pending", "pending"),
    ("skipped", "skipped"),
    ("cancelled", "cancelled"),
    ("rolledBack", "rolled back"),
)
FINISHED = ("completed", "aborted", "denied", "superseded")
STATE_STYLES = {
    "completed": "green",
    "active": "cyan",
    "paused": "yellow",
    "scheduled": "blue",
    "awaiting_approval": "magenta",
    "aborted": "red",
    "denied": "red",
    "superseded": "red",
}


class Output:
    """Where the command writes: stdout for results, stderr for errors and progress lines."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        # Not a terminal (a pipeline's log): lines as wide as they are, tables 120 columns unless $COLUMNS says.
        width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPE_WIDTH
        self.console = Console(highlight=False, width=width)
        self.errors = Console(stderr=True, highlight=False, soft_wrap=True)

    def json(self, value: Any) -> None:
        sys.stdout.write(json.dumps(value, indent=2) + "\n")
        sys.stdout.flush()

    def result(self, value: Any, renderable: RenderableType | str) -> None:
        """The API's JSON as it is, or its rendering."""
        if self.as_json:
            self.json(value)
        else:
            self.console.print(renderable, soft_wrap=isinstance(renderable, str))

    def error(self, error: ApiError) -> None:
        if self.as_json and error.status is not None:  # the API's own error body
            self.json(error.body())
        self.errors.print(Text(f"error: {error.code}: {error.detail}"))
        for key, value in error.extra.items():
            shown = ", ".join(map(str, value)) if isinstance(value, list) else json.dumps(value)
            self.errors.print(Text(f"  {key}: {shown}"))


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return " ".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def settled(wave: dict[str, Any]) -> int:
    return sum(int(wave.get(name) or 0) for name in SETTLED)


def progress_line(rollout: dict[str, Any]) -> str:
    """One line a log can keep: the state and the current wave's count."""
    waves = rollout.get("waves") or []
    line = f"{rollout['id']} {rollout['state']}"
    current = rollout.get("currentWave")
    if isinstance(current, int) and 0 <= current < len(waves):
        wave = waves[current]
        line += f"  wave {current + 1}/{len(waves)}: {settled(wave)}/{wave['total']} settled"
        for key, words in (("inFlight", "in flight"), ("failed", "failed"), ("cancelled", "cancelled")):
            if wave.get(key):
                line += f", {wave[key]} {words}"
    if rollout.get("pausedReason"):
        line += f"  ({rollout['pausedReason']})"
    return line


def _blocker(blocker: dict[str, Any] | None) -> str:
    if not blocker:
        return ""
    return str(blocker.get("detail") or blocker.get("code") or "")


def _newer(shown: dict[str, Any]) -> int:
    """Nodes left out of the snapshot because they run a newer release (0 when the server does not say)."""
    return int((shown.get("excluded") or {}).get("newer") or 0)


def _pool(pool_id: str, names: Mapping[str, str]) -> str:
    return names.get(pool_id, pool_id)


def rollout_view(
    rollout: dict[str, Any],
    names: Mapping[str, str] = EMPTY,
    *,
    more: Iterable[tuple[str, str]] = (),
    gates: RenderableType | None = None,
) -> RenderableType:
    """The rollout and its waves, each a progress bar of its settled nodes and its nodes counted by state;
    ``more``: rows after the state (how it ended, the supersede chain); ``gates``: drawn below the waves."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("rollout", Text(rollout["id"]))
    head.add_row("version", Text(str(rollout.get("version"))))
    head.add_row("state", state_text(rollout["state"]))
    for label, text in more:
        head.add_row(label, Text(text))
    for label, key in (
        ("paused", "pausedReason"),
        ("selector", "selector"),
        ("starts at", "startAt"),
        ("ends by", "endBy"),
    ):
        if rollout.get(key):
            head.add_row(label, Text(str(rollout[key])))
    if rollout.get("createdBy"):
        head.add_row("created by", Text(str(rollout["createdBy"])))
    if rollout.get("approvalsRequired"):
        approvals = rollout.get("approvals") or []
        who = ", ".join(str(a.get("user")) for a in approvals)
        head.add_row(
            "approvals", Text(f"{len(approvals)} of {rollout['approvalsRequired']}" + (f": {who}" if who else ""))
        )
    if _newer(rollout):
        head.add_row("left out", Text(f"{_newer(rollout)} nodes already on a newer release"))
    if rollout.get("blocker"):
        head.add_row("waiting", Text(_blocker(rollout["blocker"])))
    head.add_row("pools", Text(", ".join(_pool(p, names) for p in rollout.get("poolIds") or [])))

    waves = Table(box=None, pad_edge=False)
    for name in ("wave", "%", "progress", "settled", *(heading for _, heading in COUNTS)):
        waves.add_column(name, justify="left" if name == "progress" else "right", no_wrap=True)
    current = rollout.get("currentWave")
    every = rollout.get("waves") or []
    for wave in every:
        total = int(wave["total"])
        marker = "▸" if wave["index"] == current and rollout["state"] not in FINISHED else " "
        waves.add_row(
            f"{marker}{wave['index'] + 1}",
            str(wave["percent"]),
            ProgressBar(total=max(total, 1), completed=settled(wave), width=20),
            f"{settled(wave)}/{total}",
            *(str(wave.get(key) or 0) for key, _ in COUNTS),
        )
    if len(every) > 1:
        total = sum(int(w["total"]) for w in every)
        done = sum(settled(w) for w in every)
        waves.add_row(
            " all", "", "", f"{done}/{total}", *(str(sum(int(w.get(key) or 0) for w in every)) for key, _ in COUNTS)
        )
    parts: list[RenderableType] = [head, Text(""), waves]
    if gates is not None:
        parts += [Text(""), gates]
    return Group(*parts)


def rollouts_table(rollouts: Iterable[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False)
    table.add_column("id", min_width=ID_WIDTH, no_wrap=True)
    for name in ("version", "state", "wave", "nodes", "created"):
        table.add_column(name, no_wrap=True)
    for rollout in rollouts:
        waves = rollout.get("waves") or []
        total = sum(int(w["total"]) for w in waves)
        succeeded = sum(int(w.get("succeeded") or 0) for w in waves)
        table.add_row(
            rollout["id"],
            str(rollout.get("version")),
            state_text(rollout["state"]),
            f"{min(int(rollout.get('currentWave') or 0) + 1, len(waves))}/{len(waves)}",
            f"{succeeded}/{total}",
            str(rollout.get("createdAt", ""))[:19],
        )
    return table


def nodes_table(rows: Iterable[dict[str, Any]], names: Mapping[str, str] = EMPTY) -> Table:
    """A rollout's node rows: name and id, the wave counted from 1, state, and what each one waits for."""
    table = Table(box=None, pad_edge=False)
    table.add_column("node", overflow="fold")
    table.add_column("id", min_width=ID_WIDTH, no_wrap=True)
    for name in ("wave", "state", "previous", "reason", "waiting"):
        table.add_column(name, overflow="fold")
    for row in rows:
        wave = row.get("wave")
        table.add_row(
            names.get(row["nodeId"], ""),
            row["nodeId"],
            str(wave + 1) if isinstance(wave, int) else "",
            state_text(row["state"]),
            str(row.get("previousVersion") or ""),
            str(row.get("reason") or ""),
            Text(_blocker(row.get("blocker"))),
        )
    return table


def plan_view(
    plan: dict[str, Any], names: Mapping[str, str] = EMPTY, *, gates: RenderableType | None = None
) -> RenderableType:
    """A dry run's plan: waves with their nodes per pool, budgets, the estimated duration; its schedule, the
    rollout it would supersede and its gates (``gates``, drawn last) when the server's plan carries them."""
    pools = list(plan.get("poolIds") or [])
    head = Text(
        f"dry run: {plan.get('nodes')} nodes to bcd {plan.get('version')}, "
        f"estimated {duration(plan.get('estimatedSeconds'))} at most; nothing was created"
    )
    if _newer(plan):
        head.append(f"\n{_newer(plan)} nodes already on a newer release are left out")
    for label, key in (("starts at", "startAt"), ("ends by", "endBy"), ("at its end", "endBehavior")):
        if plan.get(key):
            head.append(f"\n{label}: {plan[key]}")
    if plan.get("supersedes"):
        head.append(f"\nsupersedes {plan['supersedes']}")
    waves = Table(box=None, pad_edge=False)
    waves.add_column("wave", justify="right")
    waves.add_column("%", justify="right")
    waves.add_column("nodes", justify="right")
    for pool in pools:
        waves.add_column(_pool(pool, names), justify="right", overflow="fold")
    for wave in plan.get("waves") or []:
        per_pool = wave.get("pools") or {}
        waves.add_row(
            str(wave["index"] + 1), str(wave["percent"]), str(wave["total"]), *(str(per_pool.get(p, 0)) for p in pools)
        )
    budgets = Table(box=None, pad_edge=False)
    budgets.add_column("pool", no_wrap=True)
    budgets.add_column("budget", justify="right")
    budgets.add_column("in use", justify="right")
    for pool, budget in (plan.get("budgets") or {}).items():
        budgets.add_row(_pool(pool, names), str(budget.get("allowed")), str(budget.get("inUse")))
    parts: list[RenderableType] = [head, Text(""), waves, Text(""), budgets]
    if gates is not None:
        parts += [Text(""), gates]
    return Group(*parts)
