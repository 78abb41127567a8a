"""A plug-in's answer to a request, sent by the async front (front.py) before Django sees it.

``fleet.plugins.register_quick_answers`` says what a plug-in may answer there (rollout: a download of a binary its
process served before). The front offers it only a ``GET`` or ``HEAD`` without a body whose Host Django would take,
and a plug-in that fails leaves the request to Django.
"""

from __future__ import annotations

import structlog
from prometheus_client import Counter

from fleet.plugins import QuickAnswer, quick_answer
from fleet.watch.asgi import Scope, host_allowed

log = structlog.get_logger(__name__)

QUICK_ANSWERS = Counter(
    "fleet_watch_quick_answers",
    "Requests a plug-in answered in the async front, without Django (fleet.plugins.register_quick_answers).",
)
QUICK_METHODS = ("GET", "HEAD")


def plug_in_answer(scope: Scope) -> QuickAnswer | None:
    """A plug-in's answer to this request, counted; None: Django answers it."""
    if scope["method"] not in QUICK_METHODS:
        return None
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        return None
    try:
        answer = quick_answer(scope["method"], scope["path"], headers)
    except Exception:  # a plug-in's failure is no reason to fail a request Django can answer
        log.exception("fleet.watch.quick_answer_failed", path=scope["path"])
        return None
    if answer is None or not host_allowed(scope):
        return None
    QUICK_ANSWERS.inc()
    return answer
