"""The project speaks for itself: every rule the code and the docs cite is written in the repository.

A citation is ``docs/<name>.md#<anchor>`` (or a plain ``docs/<name>.md``, or a relative Markdown link
inside a doc); it must name a tracked doc and one of its headings, anchored as GitHub anchors them.
No file may point at a document outside the repository. The README and docs/architecture.md name
paths and modules; each must exist. Fast: reads the tracked files (``git ls-files``), no services.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A reference to the external brief the project was first written from: a section number after
# the word, or the file's name. (Written so that this file does not match itself.)
OUTSIDE_REFERENCE = re.compile(r"\bCONTRACT(?:\s*§|\s+(?:section\s+)?\d|\.md)", re.IGNORECASE)

# docs/<name>.md or README.md, optionally #anchor, not inside a longer path or URL (…/docs/x.md is someone else's).
DOC_CITATION = re.compile(r"(?<![\w./-])((?:docs/[\w.-]+|README)\.md)(?:#([\w-]+))?")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
PACKAGES = ("benchmarks", "core", "demo", "fleet", "project", "rollout", "simulator")


@cache
def tracked() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return tuple(name for name in listed.decode().split("\0") if name and (ROOT / name).is_file())


@cache
def text_of(name: str) -> str | None:
    """The file's text, or None for a binary file (screenshots, …)."""
    data = (ROOT / name).read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def outside_fences(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of Markdown text that is not inside a fenced code block."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text lowercased, punctuation dropped but ``-`` and ``_``,
    each space a ``-``. Markup goes first: a link keeps its text, code its content."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors_of(name: str) -> frozenset[str]:
    return anchors_in(text_of(name) or "")


def anchors_in(text: str) -> frozenset[str]:
    """Every anchor a doc offers: its headings (a repeated one gets -1, -2, …) and <a id> tags."""
    seen: dict[str, int] = {}
    anchors = set(HTML_ANCHOR.findall(text))
    for _, line in outside_fences(text):
        match = HEADING.match(line)
        if not match:
            continue
        anchor = github_anchor(match.group(2))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(anchors)


def checked_texts() -> Iterator[tuple[str, str]]:
    for name in tracked():
        text = text_of(name)
        if text is not None:
            yield name, text


def citation_problem(doc: str, anchor: str | None) -> str | None:
    if doc not in tracked():
        return f"{doc} is not a tracked file"
    if anchor is not None and anchor not in anchors_of(doc):
        return f"{doc} has no heading with the anchor #{anchor}"
    return None


def test_github_anchor_follows_githubs_rules():
    assert github_anchor("Readiness before success (`minReadySeconds`)") == "readiness-before-success-minreadyseconds"
    assert github_anchor("Engine: `python -m benchmarks engine`") == "engine-python--m-benchmarks-engine"
    assert github_anchor("Sizing for 10,000 and 100,000 nodes") == "sizing-for-10000-and-100000-nodes"
    assert github_anchor("`POST agent/session` (URL name `fleet-agent-session`)") == (
        "post-agentsession-url-name-fleet-agent-session"
    )
    assert github_anchor("See [the plan](#the-plan) — twice") == "see-the-plan--twice"


def test_anchors_number_repeated_headings_and_skip_code_blocks():
    text = '# Title\n## Options\n```sh\n# not a heading\n```\n### Options\n## Options ##\n<a id="by-hand"></a>text\n'
    assert anchors_in(text) == {"title", "options", "options-1", "options-2", "by-hand"}


def test_the_checks_would_catch_what_they_look_for():
    word = "CONTRACT"  # never next to a number in this file's own text, which the scan reads too
    for outside in (f"({word} 9.3)", f"{word} 8's hot path", f"{word} section 6", f"{word}.md", f"{word.lower()} §4"):
        assert OUTSIDE_REFERENCE.search(outside), outside
    for fine in ("the import contracts in pyproject.toml", "an import contract allows exactly that"):
        assert not OUTSIDE_REFERENCE.search(fine), fine
    assert citation_problem("docs/controller.md", "the-tick") is None
    assert citation_problem("docs/controller.md", "no-such-heading")
    assert citation_problem("docs/" + "no-such-doc.md", None)  # split: the scan reads this file too
    assert [m.group(1, 2) for m in DOC_CITATION.finditer("see docs/api.md#lists, https://x.org/docs/y.md")] == [
        ("docs/api.md", "lists")
    ]


def test_no_file_points_at_a_document_outside_the_repository():
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in checked_texts()
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert not found, "cite the project's own docs (docs/<name>.md#<anchor>) instead:\n" + "\n".join(found)


def test_every_doc_citation_names_an_existing_doc_and_heading():
    broken = []
    for name, text in checked_texts():
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOC_CITATION.finditer(line):
                problem = citation_problem(match.group(1), match.group(2))
                if problem:
                    broken.append(f"{name}:{number}: {match.group(0)}: {problem}")
    assert not broken, "\n".join(broken)


def test_every_relative_link_in_markdown_resolves():
    broken = []
    for name in tracked():
        if not name.endswith(".md"):
            continue
        folder = Path(name).parent
        for number, line in outside_fences(text_of(name) or ""):
            for target in MARKDOWN_LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                resolved = (folder / path).as_posix() if path else name
                resolved = str(Path(resolved)).replace("\\", "/")
                if resolved.endswith(".md"):
                    problem = citation_problem(resolved, anchor or None)
                elif any(t == resolved or t.startswith(resolved.rstrip("/") + "/") for t in tracked()):
                    problem = None
                else:
                    problem = f"{resolved} is not tracked"
                if problem:
                    broken.append(f"{name}:{number}: ({target}): {problem}")
    assert not broken, "\n".join(broken)


def is_tracked_path(path: str) -> bool:
    if path.endswith("/"):
        return any(name.startswith(path) for name in tracked())
    return path in tracked()


def module_file(dotted: str) -> str | None:
    base = dotted.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in tracked():
            return candidate
    return None


def defines(source: str, name: str) -> bool:
    """Whether a module defines or imports ``name`` (a function, a class, a constant, a re-export)."""
    word = re.escape(name)
    return bool(
        re.search(
            rf"^\s*(?:async\s+)?(?:def|class)\s+{word}\b|^\s*{word}\s*[:=]|^\s*{word},?\s*$|"
            rf"\bimport\b[^\n(]*\b{word}\b",
            source,
            re.MULTILINE,
        )
    )


def named_paths_and_modules(name: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, token, problem) for each backticked path or dotted module of a doc's prose."""
    top_level = {entry.split("/")[0] for entry in tracked()}
    for number, line in outside_fences(text_of(name) or ""):
        for token in INLINE_CODE.findall(line):
            token = re.sub(r"\(.*\)$", "", token.strip())
            first = token.split("/")[0]
            if re.fullmatch(r"(?:[\w.-]+/)+[\w.-]*", token) and first in top_level:
                last = token.rsplit("/", 1)[1]
                if last == "" or "." in last:  # a folder or a file; rollout/all is a task's name
                    yield number, token, None if is_tracked_path(token) else "no such tracked path"
            elif re.fullmatch(r"[a-z_]+(?:\.\w+)+", token) and first.split(".")[0] in PACKAGES:
                parts = token.split(".")
                for cut in range(len(parts), 1, -1):
                    module = module_file(".".join(parts[:cut]))
                    if module:
                        attribute = parts[cut] if cut < len(parts) else None
                        source = text_of(module) or ""
                        problem = None
                        if attribute is not None and not defines(source, attribute):
                            problem = f"{module} defines no {attribute}"
                        yield number, token, problem
                        break
                else:
                    if re.fullmatch(r"[a-z_]+", parts[1]):  # fleet.W001 is a check id, fleet.nodes a module
                        yield number, token, "no such module"


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_paths_and_modules_named_exist(doc):
    named = list(named_paths_and_modules(doc))
    assert len(named) > 10, "the scan found (almost) nothing: the pattern broke"
    missing = [f"{doc}:{number}: `{token}`: {problem}" for number, token, problem in named if problem]
    assert not missing, "\n".join(missing)
