"""What ``status`` adds to a rollout's waves: how it ended (who and why), its gates' latest results and the
supersede chain. Each reads the API's own JSON and stays quiet about a field the server does not send (older
servers have no ``abortedReason``, ``supersedes`` or ``supersededBy``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text

from rollout.ctl.client import Api, ApiError

GATE_STYLES = {"pass": "green", "fail": "red", "inconclusive": "yellow", "pending": "blue"}
#: The events that say why a rollout ended (read only for a rollout that ended so).
ENDING_EVENTS = ("rollout.denied", "rollout.aborted", "rollout.deadline", "rollout.gate_failed")


def ending_events(api: Api, rollout: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that explain a denied or aborted rollout (none for any other state, nor when they cannot be
    read: the state is shown all the same, its who and why as unknown)."""
    if rollout.get("state") not in ("denied", "aborted"):
        return []
    try:
        events = list(api.pages(f"rollouts/{rollout['id']}/events/", {"limit": "1000"}))
    except ApiError:
        return []
    return [event for event in events if event.get("kind") in ENDING_EVENTS]


def gates_of(api: Api, rollout_id: str) -> list[dict[str, Any]] | None:
    """The gates' latest results; None when they cannot be read now (a transient refusal while watching)."""
    try:
        answer = api.get(f"rollouts/{rollout_id}/gates/")
    except ApiError as exc:
        if exc.transient:
            return None
        if exc.status == 404:  # a server without gates
            return []
        raise
    return answer if isinstance(answer, list) else []


def _last(events: Iterable[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    found = None
    for event in events:
        if event.get("kind") == kind:
            found = event
    return found


def ending(rollout: dict[str, Any], events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``[(label, text)]``: who ended the rollout and why, for a denied, aborted or superseded one."""
    state = rollout.get("state")
    rows: list[tuple[str, str]] = []
    if state == "denied":
        denied = _last(events, "rollout.denied")
        data = (denied or {}).get("data") or {}
        rows.append(("denied by", f"{data.get('actor', 'unknown')} at {(denied or {}).get('at', '?')}"))
        if data.get("comment"):
            rows.append(("comment", str(data["comment"])))
    elif state == "aborted":
        aborted = _last(events, "rollout.aborted")
        data = (aborted or {}).get("data") or {}
        rows.append(("aborted by", f"{data.get('actor', 'unknown')} at {(aborted or {}).get('at', '?')}"))
        rows.append(("why", _abort_reason(rollout, events)))
        if data:
            rows.append(("abort did", _abort_did(data)))
    elif state == "superseded" and rollout.get("supersededBy"):
        rows.append(("superseded by", str(rollout["supersededBy"])))
    return rows


def _abort_reason(rollout: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """Why, in words: from ``abortedReason`` (``manual``, ``deadline``, ``gate_failed:<name>``) and the events
    before the abort (an older server gives no ``abortedReason``: the events alone)."""
    reason = str(rollout.get("abortedReason") or "")
    before = [e.get("kind") for e in events]
    last = before[-2] if len(before) > 1 and before[-1] == "rollout.aborted" else None
    if reason == "manual":
        return "an operator's abort"
    if reason.startswith("gate_failed:") and last != "rollout.gate_failed":
        return reason
    if reason == "deadline" or last == "rollout.deadline":
        deadline = (_last(events, "rollout.deadline") or {}).get("data") or {}
        return f"its endBy ({deadline.get('endBy', '?')}) passed (endBehavior {deadline.get('endBehavior', '?')})"
    if last == "rollout.gate_failed":
        gate = (_last(events, "rollout.gate_failed") or {}).get("data") or {}
        return f"gate_failed:{gate.get('gate', '?')} ({gate.get('detail') or 'no detail'})"
    return "an operator's abort"


def _abort_did(data: dict[str, Any]) -> str:
    parts = [f"{data.get('cancelled', 0)} pending cancelled"]
    if data.get("rollback"):
        parts.append(f"{data.get('rolledBack', 0)} in flight sent back")
        if data.get("notRolledBack"):
            parts.append(f"{data['notRolledBack']} could not be sent back")
    else:
        parts.append(f"{data.get('stillInFlight', 0)} left in flight to settle")
    return ", ".join(parts) + "; succeeded nodes keep the release"


def chain(rollout: dict[str, Any]) -> list[tuple[str, str]]:
    """The supersede chain, when the representation carries it."""
    rows = []
    if rollout.get("supersedes"):
        rows.append(("supersedes", str(rollout["supersedes"])))
    if rollout.get("supersededBy") and rollout.get("state") != "superseded":
        rows.append(("superseded by", str(rollout["supersededBy"])))
    return rows


def gates_table(gates: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, title="gates", title_justify="left")
    for name in ("gate", "state", "value", "at", "failures in a row", "detail"):
        table.add_column(name, overflow="fold", no_wrap=name in ("state", "at"))
    for gate in gates:  # a dry run's gates may carry no result yet: blank cells
        value = gate.get("value")
        state = str(gate.get("state") or "")
        table.add_row(
            str(gate.get("name")),
            Text(state, style=GATE_STYLES.get(state, "")),
            "" if value is None else f"{value:g}" if isinstance(value, int | float) else str(value),
            str(gate.get("at") or ""),
            str(gate.get("consecutiveFailures", "")),
            str(gate.get("detail") or ""),
        )
    return table
