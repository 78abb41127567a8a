"""Fixtures of the Chromium tests: Debian's Chromium (headless, driven by Playwright) at 1,400 px, the
console's screenshots, and the measure of a page that must fit its width.

Screenshots go to a temporary folder; with UPDATE_SCREENSHOTS=1 they replace docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.db import connections

from tests.rollout.conftest import module_settings, releases  # noqa: F401  (shared fixtures)

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDTH = 1400  # the operator's screen the console is laid out for (docs/console.md)
# The probe's flags: no sandbox as root, and no background traffic off this machine.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# What does not fit the viewport's width: the page itself (a horizontal scroll bar); any table wider than the
# box that holds it (the admin's lists scroll inside `.results`, which the page's own width would not show); a
# table cell cut off, by a box that hides what overflows it or by its own width (its content wider than the cell);
# and the page's action buttons drawn over the words of any heading of the content (the admin floats them up
# beside the title).
OVERFLOW = """() => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) found.push(`page: ${root.scrollWidth} > ${root.clientWidth}`);
  for (const table of document.querySelectorAll('table')) {
    const box = table.parentElement;
    if (table.offsetWidth > box.clientWidth + 1)
      found.push(`table ${table.id || table.className || '?'}: ${table.offsetWidth} > ${box.clientWidth}`);
  }
  const name = (cell) => `${cell.tagName} ${cell.className || ''} "${cell.innerText.trim().slice(0, 40)}"`;
  for (const cell of document.querySelectorAll('#content td, #content th')) {
    if (!cell.offsetWidth || cell.closest('.visually-hidden')) continue;  // read aloud, never seen
    if (cell.scrollWidth > cell.clientWidth + 1)
      found.push(`cell ${name(cell)}: its content ${cell.scrollWidth} > ${cell.clientWidth}`);
    const c = cell.getBoundingClientRect();
    for (let box = cell.parentElement; box && box !== document.body; box = box.parentElement) {
      if (getComputedStyle(box).overflowX === 'visible') continue;
      const b = box.getBoundingClientRect();
      if (c.right > b.right + 1 || c.left < b.left - 1)
        found.push(`cell ${name(cell)}: cut off by ${box.id || box.className || box.tagName}`);
      break;
    }
  }
  const tools = document.querySelector('.object-tools');
  if (tools && tools.offsetHeight) {
    const b = tools.getBoundingClientRect();
    for (const heading of document.querySelectorAll('#content h1, #content h2, #content-main h2')) {
      if (tools.contains(heading)) continue;
      const words = document.createRange();
      words.selectNodeContents(heading);
      for (const a of words.getClientRects())
        if (a.right > b.left && b.right > a.left && a.bottom > b.top && b.bottom > a.top)
          found.push(`the actions over the ${heading.tagName} "${heading.textContent.trim()}"`);
    }
  }
  return [...new Set(found)];
}"""


@pytest.fixture
def browser_page(monkeypatch):
    """A page of a fresh headless Chromium, 1,400 px wide (``page.set_viewport_size`` narrows it)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    # Playwright's sync API runs an event loop in this thread; only for this test (a leak fails check --deploy).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        try:
            yield page
        finally:
            browser.close()
            # While Playwright's event loop runs in this thread, the test's ORM calls get database
            # connections of their own (asgiref's context-local storage): close them here, or the
            # test database cannot be dropped at the end of the session.
            connections.close_all()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    """The folder a test's screenshots go to (``keep_screenshots`` at the test's end checks and keeps them)."""
    shots = tmp_path / "screenshots"
    shots.mkdir()
    return shots


def keep_screenshots(shots: Path, names: set[str]) -> None:
    """Each of ``names`` was taken and holds a rendered page (over 10 kB); with UPDATE_SCREENSHOTS=1 they
    replace the ones in docs/screenshots/ (called last: a test that failed earlier replaces nothing)."""
    taken = {path.name: path.stat().st_size for path in shots.iterdir()}
    assert set(taken) == names, taken
    assert all(size > 10_000 for size in taken.values()), taken
    if os.environ.get("UPDATE_SCREENSHOTS"):
        for name in names:
            shutil.copy(shots / name, DOCS / name)


def log_in(page, base_url: str, username: str, password: str, *, then: str = "/admin/") -> None:
    page.goto(f"{base_url}/admin/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base_url}{then}")


def overflowing(page) -> list[str]:
    """What on the page is wider than its room at the viewport's width (empty when everything fits)."""
    return page.evaluate(OVERFLOW)


def shoot(page, folder: Path, name: str) -> None:
    """The page's screenshot; the page fits its 1,400 px (no horizontal scroll, no table wider than its box)."""
    page.screenshot(path=str(folder / name), full_page=True)
    assert overflowing(page) == [], name


def shoot_top(page, folder: Path, name: str, *, height: int = 1200) -> None:
    """The top ``height`` px of the page (a list of 100 nodes is 20,000 px long); the whole page fits its width."""
    width = page.viewport_size["width"]
    page.screenshot(path=str(folder / name), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})
    assert overflowing(page) == [], name
