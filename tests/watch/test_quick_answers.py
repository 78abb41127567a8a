"""What the front offers a plug-in's quick answers (fleet.plugins.register_quick_answers) and what it leaves to
Django: only a GET or HEAD without a body, with a Host Django takes; a plug-in that fails leaves it to Django."""

from __future__ import annotations

import pytest

from fleet import plugins
from fleet.plugins import QuickAnswer
from fleet.watch.quick import plug_in_answer

ANSWER = QuickAnswer(status=200, headers=(("X-Answer", "quick"),))


def scope(method: str = "GET", headers: tuple[tuple[bytes, bytes], ...] = ((b"host", b"localhost"),)) -> dict:
    return {"type": "http", "method": method, "path": "/quick", "headers": list(headers), "server": ("localhost", 80)}


@pytest.fixture
def asked(settings, monkeypatch) -> list[tuple[str, str, dict[str, str]]]:
    """What the plug-in was asked: one plug-in answering ``/quick``."""
    settings.ALLOWED_HOSTS = ["localhost"]
    asked: list[tuple[str, str, dict[str, str]]] = []

    def answers(method: str, path: str, headers: dict[str, str]) -> QuickAnswer | None:
        asked.append((method, path, dict(headers)))
        return ANSWER if path == "/quick" else None

    monkeypatch.setattr(plugins, "_quick_answers", [answers])
    return asked


def test_a_get_or_head_is_offered_with_its_headers(asked):
    assert plug_in_answer(scope()) == ANSWER
    assert plug_in_answer(scope("HEAD", ((b"host", b"localhost"), (b"if-range", b'"x"')))) == ANSWER
    assert asked == [
        ("GET", "/quick", {"host": "localhost"}),
        ("HEAD", "/quick", {"host": "localhost", "if-range": '"x"'}),
    ]


@pytest.mark.parametrize(
    "request_scope",
    [
        scope("POST"),
        scope("DELETE"),
        scope(headers=((b"host", b"localhost"), (b"content-length", b"1"))),
        scope(headers=((b"host", b"localhost"), (b"transfer-encoding", b"chunked"))),
        scope(headers=((b"host", b"elsewhere.example"),)),  # Django's 400
    ],
)
def test_what_django_answers_is_left_to_it(asked, request_scope):
    assert plug_in_answer(request_scope) is None


def test_a_plug_in_that_fails_leaves_the_request_to_django(asked, monkeypatch):
    def failing(method: str, path: str, headers: dict[str, str]) -> QuickAnswer | None:
        raise RuntimeError("broken plug-in")

    monkeypatch.setattr(plugins, "_quick_answers", [failing])
    assert plug_in_answer(scope()) is None
