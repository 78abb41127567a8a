"""docs/architecture.md's diagram of rollout/'s packages is true of the imports (grimp's graph, as lint-imports
builds it): no package imports one drawn above it, and every arrow between the controller's modules is an import."""

from __future__ import annotations

import itertools
import re
from functools import cache
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The diagram's layers, top to bottom (the test checks the diagram draws them in this order).
LAYERS = (
    ("api", "admin", "tasks", "hooks"),
    ("rollouts",),
    ("controller",),
    ("gates", "webhooks", "registry"),
    ("models",),
)


def diagram() -> list[str]:
    """The lines of the fenced block that follows "Inside `rollout/`"."""
    text = (ROOT / "docs/architecture.md").read_text()
    after = text[text.index("Inside `rollout/`") :]
    block = after[after.index("```") + 3 :]
    return block[: block.index("```")].strip("\n").splitlines()


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("rollout", exclude_type_checking_imports=True)


def test_the_diagram_draws_the_layers_in_this_order():
    lines = diagram()

    def drawn_at(name: str) -> tuple[int, int]:
        """(line, column) of the package's box: ``name/`` or ``name`` alone, not ``webhooks/deliveries``."""
        pattern = re.compile(rf"(?<![\w/]){name}(?:/(?!\w)|\b(?!/))")
        return next((i, found.start()) for i, line in enumerate(lines) if (found := pattern.search(line)))

    # Above means an earlier line, or on one line to the left (``api/, admin/ ──► rollouts/``).
    places = [{drawn_at(name) for name in layer} for layer in LAYERS]
    for upper, lower in itertools.pairwise(places):
        assert max(upper) < min(lower), places


def upward_imports(layers: tuple[tuple[str, ...], ...]) -> list[str]:
    found = []
    for i, upper in enumerate(layers):
        for lower in (name for layer in layers[i + 1 :] for name in layer):
            for up in upper:
                if graph().direct_import_exists(
                    importer=f"rollout.{lower}", imported=f"rollout.{up}", as_packages=True
                ):
                    found.append(f"rollout.{lower} -> rollout.{up}")
    return found


def test_no_package_imports_one_drawn_above_it():
    assert upward_imports(LAYERS) == []


def test_an_upward_import_is_found():
    """The check above can fail: drawn upside down, the layers have upward imports."""
    assert "rollout.rollouts -> rollout.controller" in upward_imports(tuple(reversed(LAYERS)))


CONTROLLER = "rollout.controller"


def arrows() -> list[tuple[str, str]]:
    """(importer, imported) for each arrow of the controller's lines; parenthesised words are comments."""
    modules = {name.rsplit(".", 1)[-1] for name in graph().find_children(CONTROLLER)}
    pairs = []
    for line in diagram():
        text = re.sub(r"\([^)]*\)", "", line.replace("controller/", ""))
        segments = [re.findall(r"[\w/]+", part) for part in re.split(r"─+┴?─*►", text)]
        if len(segments) < 2 or not all(segments) or not set(segments[0]) <= modules:
            continue
        for left, right in itertools.pairwise(segments):
            for a in left:
                for b in right:
                    target = f"rollout.{b.replace('/', '.')}" if "/" in b else f"{CONTROLLER}.{b}"
                    pairs.append((f"{CONTROLLER}.{a}", target))
    return pairs


def test_every_controller_arrow_is_an_import():
    drawn = arrows()
    assert ("rollout.controller.tick", "rollout.controller.start") in drawn
    assert ("rollout.controller.events", "rollout.webhooks.deliveries") in drawn
    missing = [pair for pair in drawn if not graph().direct_import_exists(importer=pair[0], imported=pair[1])]
    assert missing == []


@pytest.mark.parametrize(("importer", "imported"), [("plan", "start"), ("turns", "plan")])
def test_an_arrow_without_an_import_would_be_found(importer, imported):
    assert not graph().direct_import_exists(importer=f"{CONTROLLER}.{importer}", imported=f"{CONTROLLER}.{imported}")
