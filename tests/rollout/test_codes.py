"""Each blocker code is spelled once (issue 50, docs/controller.md#why-not-yet): ``Code`` in
rollout/controller/decisions.py, or the state or reason it takes its word from. Every other module names the
enum's member; a string written again would be a second source that can drift from the first.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from rollout.controller.decisions import NODE_CODES, ROLLOUT_CODES, Code

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "fleet", "rollout", "project", "demo", "benchmarks", "simulator")
#: Modules that may spell a code's word for a reason of their own, each with it.
ELSEWHERE = {
    # The command line and the simulated agents are plain HTTP clients: the import contracts forbid them the
    # server's code, so they spell the API's words (rollout states, the simulator's agent kinds) themselves.
    "rollout/ctl/": "a plain HTTP client (pyproject.toml's import contracts)",
    "simulator/": "a plain HTTP client (pyproject.toml's import contracts)",
    # Migrations are history: they hold the words as they were when written.
    "/migrations/": "history",
}
#: A code's word written in one more module, for another meaning: (module, word) -> why.
OTHER_MEANINGS = {
    ("rollout/controller/transitions.py", "paused"): "the verb of the refusal's sentence: 'cannot be paused now'",
    ("demo/__main__.py", "paused"): "a rollout's state as the API answers it: the demo is an HTTP client (stdlib only)",
    # rollout/words.py imports nothing of ours (every layer uses it): each state's English, keyed by the state.
    ("rollout/words.py", "paused"): "a state's key in the table of its English words",
    ("rollout/words.py", "scheduled"): "a state's key in the table of its English words",
    ("rollout/words.py", "awaiting_approval"): "a state's key in the table of its English words",
}


def _modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not any(part in f"{relative}" for part in ELSEWHERE):
                found.append(path)
    return found


def literals_of(source: str, words: set[str]) -> set[str]:
    """The words of ``words`` that ``source`` writes as a whole string literal (docstrings and f-strings' parts
    included)."""
    nodes = ast.walk(ast.parse(source))
    return {node.value for node in nodes if isinstance(node, ast.Constant) and node.value in words}


def test_each_code_is_written_in_one_module():
    words = {str(code) for code in Code}
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        module = path.relative_to(ROOT).as_posix()
        for word in literals_of(path.read_text(), words):
            if (module, word) not in OTHER_MEANINGS:
                where[word].append(module)
    assert sorted(where) == sorted(words)  # the scan sees every code somewhere (it reads the right files)
    twice = {word: modules for word, modules in where.items() if len(modules) > 1}
    assert twice == {}
    for module, word in OTHER_MEANINGS:  # each exception is still needed
        assert word in literals_of((ROOT / module).read_text(), words), module


def test_a_second_spelling_is_found():
    """The scan fails on a code written again (so the test above can fail)."""
    assert literals_of('if held.code == "budget_full":\n    pass\n', {"budget_full"}) == {"budget_full"}
    assert literals_of('x = f"{Code.BUDGET_FULL}: full"\n', {"budget_full"}) == set()


def test_node_and_rollout_codes_are_the_enum():
    assert set(NODE_CODES) | set(ROLLOUT_CODES) == set(Code)
    assert len(set(NODE_CODES)) == len(NODE_CODES)
    assert len(set(ROLLOUT_CODES)) == len(ROLLOUT_CODES)
