"""A rollout's state in a sentence meant for a person (a 409's ``detail``, a conflict's holders): English, not
the state's code. "an active rollout", "a rollout awaiting approval"; ``A awaiting_approval rollout`` never.

No import of ours: the controller, the services and the API all use it.
"""

from __future__ import annotations


def _words(state: str) -> str:
    return state.replace("_", " ")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def a_rollout(state: str) -> str:
    """ "an active rollout", "a scheduled rollout", "a rollout awaiting approval": a one-word state stands before
    "rollout", a phrase after it."""
    words = _words(state)
    if " " in words:
        return f"a rollout {words}"
    return f"{_article(words)} {words} rollout"


def state_words(state: str) -> str:
    """The state alone: "active", "awaiting approval"."""
    return _words(state)


def cannot_be(state: str, done: str) -> str:
    """ "An active rollout cannot be started.", "A rollout awaiting approval cannot be paused." """
    subject = a_rollout(state)
    return f"{subject[0].upper()}{subject[1:]} cannot be {done}."
