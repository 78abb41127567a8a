"""Every log line is one JSON object with the same fields, whoever logged it (core/log_lines.py)."""

import io
import json
import logging

import pytest
import structlog

from core.log_lines import JSONLines


@pytest.fixture
def lines():
    """What the project's handler writes for the loggers ``test.*``, at INFO, as dicts."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONLines())
    logger = logging.getLogger("test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_an_event_and_another_librarys_record_have_the_same_fields(lines):
    structlog.get_logger("test.ours").info("node_upgrade.succeeded", node="n-1", count=1)
    logging.getLogger("test.theirs").warning("Not Found: %s", "/api/x")
    ours, theirs = lines()
    assert ours.pop("timestamp").endswith("Z")  # UTC, ISO 8601
    assert theirs.pop("timestamp").endswith("Z")
    assert ours == {
        "event": "node_upgrade.succeeded",
        "level": "info",
        "logger": "test.ours",
        "node": "n-1",
        "count": 1,
    }
    assert theirs == {"event": "Not Found: /api/x", "level": "warning", "logger": "test.theirs"}


def test_a_traceback_is_a_field_of_the_line(lines):
    for logger in (structlog.get_logger("test.ours"), logging.getLogger("test.theirs")):
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError:
            logger.exception("failed")
    for line in lines():
        assert (line["event"], line["level"]) == ("failed", "error")
        assert line["exception"].startswith("Traceback")
        assert "ZeroDivisionError" in line["exception"]


def test_an_event_below_the_level_is_not_rendered(lines, monkeypatch):
    rendered = []
    monkeypatch.setattr("core.log_lines._render", lambda *args: rendered.append(args) or "{}")
    structlog.get_logger("test.ours").debug("fleet.watch.detail")
    assert rendered == []
    assert lines() == []


def test_a_line_that_cannot_be_written_does_not_fail_the_caller(capsys):
    """The standard library's handler reports a failed write (a closed pipe) and goes on: a heartbeat is answered
    whatever happens to its log line."""

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError("the log collector went away")

    handler = logging.StreamHandler(Broken())
    handler.setFormatter(JSONLines())
    logger = logging.getLogger("test.broken")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        structlog.get_logger("test.broken").info("fleet.session.reported", node_id="n-1")  # does not raise
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert "BrokenPipeError" in capsys.readouterr().err  # reported by logging.Handler.handleError
