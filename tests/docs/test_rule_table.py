"""docs/architecture.md's rule→file table leads from each rule to the code that decides it, and stays true.

Each row's second cell begins with the one place the rule is decided: a Python file and a function
or class it defines (or a configuration file, for a rule that lives in one). Every name after a file
is in that file, until the next file; a parenthesis is read on its own, so a value in one (a code,
a lookup) needs no file unless it follows one. A shorthand such as ``create._snapshot`` is refused:
the reader would have to guess its folder. Fast: reads the files, imports nothing.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEADING = "## Where each rule lives"

TOKEN = re.compile(r"`([^`\n]+)`")
FILE = re.compile(r"(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:py|conf|service|toml|yml|cfg|sh|html)")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
CALL = re.compile(r"\(.*\)$")  # pool_budgets(split=True), on_target()
CHECK_ID = re.compile(r"[a-z]+\.[EW]\d{3}")  # fleet.E007, rollout.W004


@dataclass(frozen=True)
class Row:
    line: int
    rule: str
    where: str


def table_rows(text: str) -> list[Row]:
    """The rows of the table under the heading, header and rule line left out."""
    lines = text.splitlines()
    start = lines.index(HEADING)
    rows = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if not line.startswith("| ") or line.startswith("| ---") or line.startswith("| rule "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 2, f"docs/architecture.md:{number}: a row has two cells: {line}"
        rows.append(Row(number, cells[0], cells[1]))
    return rows


def segments(text: str) -> list[str]:
    """The text outside parentheses, then each parenthesis's own text (read the same way)."""
    outside: list[str] = []
    inner: list[str] = []
    depth, inside_code = 0, False
    current: list[str] = []
    for char in text:
        if char == "`":
            inside_code = not inside_code
        if inside_code or char not in "()":
            (current if depth else outside).append(char)
            continue
        if char == "(":
            depth += 1
            if depth == 1:
                current = []
                continue
        else:
            depth -= 1
            if depth == 0:
                inner.append("".join(current))
                continue
        current.append(char)
    return ["".join(outside)] + [part for inner_text in inner for part in segments(inner_text)]


@dataclass(frozen=True)
class Names:
    defined: frozenset[str]  # functions, classes and constants of the module itself
    members: frozenset[str]  # Class.member, Class.Inner.member
    strings: frozenset[str]  # the names it gives as strings: constraints, indexes, tasks, audit actions


@cache
def names_in(path: str) -> Names:
    tree = ast.parse((ROOT / path).read_text())
    defined: set[str] = set()
    members: set[str] = set()

    def define(node: ast.stmt, prefix: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.If):  # definitions under an if: settings chosen by the environment
            for child in node.body + node.orelse:
                define(child, prefix)
            return
        else:
            return
        (members if prefix else defined).update(f"{prefix}.{name}" if prefix else name for name in names)
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                define(child, f"{prefix}.{node.name}" if prefix else node.name)

    for node in tree.body:
        define(node, "")
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return Names(frozenset(defined), frozenset(members), frozenset(strings))


def decides(path: str, name: str) -> bool:
    """Whether the file itself defines ``name``: a function, a class, a method or a module constant."""
    names = names_in(path)
    return name in names.members if "." in name else name in names.defined


def is_named_in(path: str, name: str) -> bool:
    """Whether ``name`` is in the file: defined there, or given as a string. An import does not count: the
    table names where a thing lives, not where it is re-exported."""
    return decides(path, name) or name in names_in(path).strings


def row_problems(row: Row) -> list[str]:
    """What is wrong with one row: each problem a sentence naming the token."""
    problems = []
    tokens = [CALL.sub("", token.strip()) for token in TOKEN.findall(row.where)]
    lead = tokens[:2]
    if not row.where.startswith("`") or not lead or not FILE.fullmatch(lead[0]):
        problems.append(f"begins with {lead[0] if lead else 'nothing'!r}, not the file that decides the rule")
    elif lead[0].endswith(".py"):
        if not (ROOT / lead[0]).is_file():
            problems.append(f"`{lead[0]}`: no such file")
        elif len(lead) < 2 or not NAME.fullmatch(lead[1]) or not decides(lead[0], lead[1]):
            name = lead[1] if len(lead) > 1 else "nothing"
            problems.append(f"`{lead[0]}` then `{name}`: not a function or class that file defines")
    for number, text in enumerate(segments(row.where)):
        current = None
        for token in TOKEN.findall(text):
            token = CALL.sub("", token.strip())
            if FILE.fullmatch(token):
                if not (ROOT / token).is_file():
                    problems.append(f"`{token}`: no such file")
                current = token if token.endswith(".py") and (ROOT / token).is_file() else None
            elif CHECK_ID.fullmatch(token) or not NAME.fullmatch(token):
                continue  # a check's id, a value or a snippet: nothing to look up
            elif current is not None:
                if not is_named_in(current, token):
                    problems.append(f"`{token}`: not in `{current}`")
            elif token[0].islower() and "." in token:
                problems.append(f"`{token}`: a shorthand; name its file (`path/to/module.py` `name`)")
            elif number == 0:
                problems.append(f"`{token}`: no file before it")
    return problems


def test_the_reading_rules_catch_what_they_look_for():
    good = Row(1, "r", "`rollout/controller/judge.py` `wave_counts` (`refused`), `failure_ratio_exceeded`")
    assert row_problems(good) == []
    assert row_problems(Row(1, "r", "`tick.rollout_tick`"))
    assert row_problems(Row(1, "r", "`rollout/controller/tick.py` `no_such_function`"))
    assert row_problems(Row(1, "r", "`rollout/controller/nowhere.py` `rollout_tick`"))
    assert row_problems(Row(1, "r", "`rollout/controller/tick.py` `rollout_tick`, called by `create._snapshot`"))
    assert row_problems(Row(1, "r", "`rollout/controller/tick.py` `rollout_tick` (`create._snapshot`)"))
    assert row_problems(Row(1, "r", "`rollout/controller/tick.py` `rollout_tick`; `rollout/locks.py` `rollout_tick`"))
    assert row_problems(Row(1, "r", "the tick: `rollout/controller/tick.py` `rollout_tick`"))
    # tick.py imports rollout_start_nodes; it lives in start.py
    assert row_problems(Row(1, "r", "`rollout/controller/tick.py` `rollout_tick`, `rollout_start_nodes`"))
    assert segments("a (b (c) d) e") == ["a  e", "b  d", "c"]


def test_every_row_leads_to_code_that_exists():
    rows = table_rows(ARCHITECTURE.read_text())
    assert len(rows) > 60, "the table is gone or its heading changed"
    problems = [f"docs/architecture.md:{row.line}: {problem}" for row in rows for problem in row_problems(row)]
    assert not problems, "\n".join(problems)
