"""One JSON object per log line (docs/operations.md#logs), rendered once.

structlog renders the project's own events in its processor chain (``to_stdlib``, its last processor) and hands
the line to the standard library's logger as its message, marked ``structlog_rendered``; the handler's formatter
(``JSONLines``) passes such a line through and renders every other library's record (Django's, Celery's) the same
way, with the same fields. Going through the standard library keeps its routing and levels (a host's LOGGING, a
handler that swallows a failed write). Rendering once, instead of handing the event to a formatter that copies
the record and runs a second chain, made a line about a third cheaper: a web process logs one per join
(docs/benchmarks.md).
"""

from __future__ import annotations

import logging
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

#: The attribute that marks a record whose message structlog rendered already.
RENDERED = "structlog_rendered"

#: What every line carries, whoever logged it: the level, the logger's name and the time (UTC, ISO 8601).
SHARED_PROCESSORS: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]
_render = structlog.processors.JSONRenderer(sort_keys=True)


def to_stdlib(
    logger: WrappedLogger, method_name: str, event_dict: EventDict
) -> tuple[tuple[str | bytes], dict[str, Any]]:
    """structlog's last processor: the event as its JSON line, the standard library logger's message."""
    return (_render(logger, method_name, event_dict),), {"extra": {RENDERED: True}}


class JSONLines(structlog.stdlib.ProcessorFormatter):
    """A record as its JSON line: structlog's as it rendered it, another library's rendered here."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                _render,
            ],
            foreign_pre_chain=SHARED_PROCESSORS,
            **kwargs,
        )

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, RENDERED, False):
            return str(record.msg)
        return super().format(record)


def configure_structlog() -> None:
    """structlog for the project's own loggers (project/settings.py): levels checked first, through the standard
    library. Python's lookup of the calling frame for each record is off: no line prints it (the logging HOWTO's
    optimisation, ``logging._srcfile``)."""
    logging._srcfile = None
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED_PROCESSORS,
            structlog.processors.format_exc_info,
            to_stdlib,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
