"""A rollout event as a sentence an operator reads on the rollout's page (the API keeps the event's data as it
is: camelCase keys, pool ids, waves counted from 0). Waves read from 1 here, pools by name, ratios in percent.
The admin's display code only: no rule, no write."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from fleet.interface import budget_percent
from rollout.admin.display import when

Data = Mapping[str, Any]


def _n(count: object, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


#: The rollout's number of waves, which ``event_sentence`` adds to the data it is given when known.
_WAVES = "__waves__"


def _wave(data: Data) -> str:
    wave, waves = data.get("wave"), data.get(_WAVES)
    if not isinstance(wave, int):
        return "a wave"
    return f"wave {wave + 1} of {waves}" if isinstance(waves, int) else f"wave {wave + 1}"


def _by(data: Data) -> str:
    actor = data.get("actor")
    return f" by {actor}" if actor else ""


def _at(value: object) -> str:
    if isinstance(value, str):
        try:
            return when(datetime.fromisoformat(value))
        except ValueError:
            return value
    return "-"


def _created(data: Data, pools: Mapping[str, str]) -> str:
    waves = data.get("waves") or []
    names = [pools.get(str(pool_id), str(pool_id)) for pool_id in data.get("poolIds") or []]
    text = f"Created for {_n(data.get('nodes', 0), 'node')} in {len(waves)} waves ({', '.join(map(str, waves))} nodes)"
    if names:
        text += f", pools {', '.join(names)}"
    if data.get("approvalsRequired"):
        text += f"; awaits {_n(data['approvalsRequired'], 'approval')}"
    return text + "."


def _wave_started(data: Data, pools: Mapping[str, str]) -> str:
    percent = data.get("percent")
    shown = f"{percent:g}" if isinstance(percent, (int, float)) else str(percent)
    return f"{_wave(data).capitalize()} started: {_n(data.get('total', 0), 'node')}, up to {shown} %."


def _paused(data: Data, pools: Mapping[str, str]) -> str:
    reason = str(data.get("pausedReason", ""))
    if data.get("gate"):
        return f"Paused: gate {data['gate']} failed (latest value {data.get('value')})."
    if "failed" in data:
        ratio = data.get("maxFailureRatio")
        limit = f", over the {budget_percent(ratio)} allowed" if ratio is not None else ""
        return f"Paused: in {_wave(data)}, {data['failed']} failed and {data.get('succeeded', 0)} succeeded{limit}."
    if reason == "operator":
        return f"Paused{_by(data)}."
    return f"Paused ({reason.replace('_', ' ')}){_by(data)}."


def _gate_failed(data: Data, pools: Mapping[str, str]) -> str:
    detail = f": {data['detail']}" if data.get("detail") else ""
    action = str(data.get("action") or data.get("onFailure") or "pause").replace("_", " with ")
    text = f"Gate {data.get('gate')} failed (value {data.get('value', '-')}){detail}; "
    if data.get("action"):
        return text + f"{data.get('consecutiveFailures')} failures in a row: the rollout {action}s."
    return (
        text + f"{data.get('consecutiveFailures')} of {data.get('failureLimit')} failures in a row before a {action}."
    )


def _superseded(data: Data, pools: Mapping[str, str]) -> str:
    return f"Superseded{_by(data)} by rollout {data.get('supersededBy')}: it takes this rollout's nodes over."


def _started(data: Data, pools: Mapping[str, str]) -> str:
    if data.get("actor") == "schedule":
        return f"Started at its scheduled time ({_at(data.get('startAt'))})."
    return f"Started{_by(data)}."


def _deadline(data: Data, pools: Mapping[str, str]) -> str:
    return f"Its deadline ({_at(data.get('endBy'))}) passed: it {data.get('endBehavior', 'pause')}s."


def _promoted(data: Data, pools: Mapping[str, str]) -> str:
    return f"Promoted{_by(data)}: {_wave(data)} skips the rest of its soak."


def _completed(data: Data, pools: Mapping[str, str]) -> str:
    counts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in data.items())
    return f"Completed: {counts or 'no nodes'}."


def _aborted(data: Data, pools: Mapping[str, str]) -> str:
    parts = [f"{data.get('cancelled', 0)} pending cancelled"]
    if data.get("rollback"):
        parts.append(f"{data.get('rolledBack', 0)} rolled back")
        if data.get("notRolledBack"):
            parts.append(f"{data['notRolledBack']} could not be rolled back")
    if data.get("stillInFlight"):
        parts.append(f"{data['stillInFlight']} still in flight")
    kind = "Aborted with rollback" if data.get("rollback") else "Aborted"
    return f"{kind}{_by(data)}: {', '.join(parts)}."


def _approved(data: Data, pools: Mapping[str, str]) -> str:
    return f"Approved by {', '.join(data.get('approvals') or [])}: it starts."


def _denied(data: Data, pools: Mapping[str, str]) -> str:
    return f"Denied{_by(data)}: “{data.get('comment', '')}”; {data.get('cancelled', 0)} nodes freed."


def _refused(data: Data, pools: Mapping[str, str]) -> str:
    return f"Node {data.get('node')}'s agent refused the release ({data.get('code')}): {data.get('detail')}"


SENTENCES: dict[str, Callable[[Data, Mapping[str, str]], str]] = {
    "rollout.created": _created,
    "rollout.wave": _wave_started,
    "rollout.paused": _paused,
    "rollout.resumed": lambda data, pools: f"Resumed{_by(data)}.",
    "rollout.promoted": _promoted,
    "rollout.completed": _completed,
    "rollout.aborted": _aborted,
    "rollout.gate_failed": _gate_failed,
    "rollout.started": _started,
    "rollout.deadline": _deadline,
    "rollout.approved": _approved,
    "rollout.denied": _denied,
    "rollout.superseded": _superseded,
    "node_upgrade.refused": _refused,
}


def event_sentence(kind: str, data: Data, pool_names: Mapping[str, str], *, waves: int | None = None) -> str:
    """The event as a sentence (``waves``: the rollout's, for "wave 2 of 3"); a kind this module does not know
    reads as its data, key by key."""
    words = SENTENCES.get(kind)
    if words is not None:
        try:
            return words({**data, _WAVES: waves} if waves else data, pool_names)
        except (TypeError, AttributeError):  # data of an older shape: shown as it is rather than a 500
            pass
    return "; ".join(f"{key}: {value}" for key, value in sorted(data.items()))
