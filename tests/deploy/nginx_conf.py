"""docker/nginx.conf read as data: the directives of one block, for the deployment tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def nginx_directives(block: str) -> dict[str, list[list[str]]]:
    """The directives of docker/nginx.conf directly in ``block`` (a context's opening, e.g. ``events``; "" for the
    top level): each one's arguments, every time it occurs, by name."""
    from demo.web import PLACEHOLDER

    text = re.sub(r"#[^\n]*", "", (ROOT / "docker/nginx.conf").read_text())
    # A placeholder alone on its line stands for whole directives (AGENT_SERVERS: `server ...;` lines): one of its own.
    text = re.sub(r"^(\s*)" + PLACEHOLDER.pattern + r"\s*$", r"\1\2;", text, flags=re.M)
    text = PLACEHOLDER.sub(lambda match: match[1], text)
    if block:
        start = text.index(block + " {") + len(block) + 2
        depth, end = 1, start
        while depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        text = text[start : end - 1]
    flat = ""
    while flat != text:  # nested blocks out, innermost first
        flat, text = text, re.sub(r"\{[^{}]*\}", ";", text)
    found: dict[str, list[list[str]]] = {}
    for statement in flat.split(";"):
        words = statement.split()
        if words:
            found.setdefault(words[0], []).append(words[1:])
    return found


def number(directives: dict[str, list[list[str]]], name: str) -> int:
    ((value,),) = directives[name]  # once, one argument (a unit "s" dropped)
    return int(value.rstrip("s"))
