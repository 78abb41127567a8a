"""A rollout's state in a sentence meant for a person (a 409's ``detail``, a conflict's holders): English, not
the state's code. "an active rollout", "a rollout awaiting approval"; ``A awaiting_approval rollout`` never.

No import of ours: the controller, the services and the API all use it.
"""

from __future__ import annotations

#: Each state as an adjective before "rollout", or (a tuple) a phrase after it.
_WORDS: dict[str, str | tuple[str]] = {
    "active": "active",
    "paused": "paused",
    "completed": "completed",
    "aborted": "aborted",
    "scheduled": "scheduled",
    "denied": "denied",
    "awaiting_approval": ("awaiting approval",),
}


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def a_rollout(state: str) -> str:
    """ "an active rollout", "a scheduled rollout", "a rollout awaiting approval" (any other state: its words)."""
    words = _WORDS.get(state, state.replace("_", " "))
    if isinstance(words, tuple):
        return f"a rollout {words[0]}"
    return f"{_article(words)} {words} rollout"


def state_words(state: str) -> str:
    """The state alone: "active", "awaiting approval"."""
    words = _WORDS.get(state, state.replace("_", " "))
    return words[0] if isinstance(words, tuple) else words


def cannot_be(state: str, done: str) -> str:
    """ "An active rollout cannot be started.", "A rollout awaiting approval cannot be paused." """
    subject = a_rollout(state)
    return f"{subject[0].upper()}{subject[1:]} cannot be {done}."
