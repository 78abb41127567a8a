"""``create``'s gates on the command line (docs/ctl.md#gates): ``--gate`` in a short syntax, ``--gates FILE``
as the API takes them.

    --gate 'NAME:prometheus=QUERY<=MAX[:ON_FAILURE]'    e.g. 'errors:prometheus=sum(rate(http_5xx[5m]))<=0.01'
    --gate 'NAME:http=URL[:ON_FAILURE]'                 e.g. 'canary:http=https://status.example.net/ok'

The name ends at the first ``:``; a Prometheus gate's maximum is the number after the last ``<=`` (PromQL may
hold ``<=`` itself); ``ON_FAILURE`` (``pause``, ``abort``, ``abort_rollback``: what the rollout does when the
gate fails too often) is sent as the gate's ``onFailure`` and left to the server's default when not given.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ON_FAILURE = ("pause", "abort", "abort_rollback")
SYNTAX = "NAME:prometheus=QUERY<=MAX or NAME:http=URL (optionally ending :pause, :abort or :abort_rollback)"


def gate(text: str) -> dict[str, Any]:
    """One ``--gate``: the API's gate object."""
    name, sep, rest = text.partition(":")
    kind, eq, spec = rest.partition("=")
    if not (name and sep and eq and spec) or kind not in ("prometheus", "http"):
        raise argparse.ArgumentTypeError(f"{text!r} is not {SYNTAX}")
    on_failure = None
    head, colon, tail = spec.rpartition(":")
    if colon and tail in ON_FAILURE:
        spec, on_failure = head, tail
    body: dict[str, Any] = {"name": name}
    if kind == "http":
        body["http"] = {"url": spec}
    else:
        query, le, top = spec.rpartition("<=")
        limit = _number(top.strip())
        if not (le and query.strip()) or limit is None:
            raise argparse.ArgumentTypeError(f"{text!r}: a Prometheus gate is NAME:prometheus=QUERY<=MAX")
        body["prometheus"] = {"query": query.strip(), "max": limit}
    if on_failure:
        body["onFailure"] = on_failure
    return body


def _number(text: str) -> int | float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def gates_file(path: str) -> list[dict[str, Any]]:
    """``--gates FILE`` (``-``: standard input): a JSON list of gates exactly as the API takes them."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        gates = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(gates, list) or not all(isinstance(g, dict) for g in gates):
        raise argparse.ArgumentTypeError(f"{path} is not a JSON list of gate objects")
    return gates
