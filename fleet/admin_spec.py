"""How the console shows a node's desired state: the version first, the signed envelope folded away."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from fleet.models import Node


@admin.display(description="desired version")
def desired(node: Node) -> str:
    daemon = (node.spec or {}).get("daemon")
    return str(daemon.get("version")) if isinstance(daemon, dict) else "-"


@admin.display(description="desired state (spec)")
def desired_state(node: Node) -> SafeString | str:
    """The spec's daemon as an operator reads it; the signed envelope it carries folded away."""
    daemon = (node.spec or {}).get("daemon")
    if not isinstance(daemon, dict):
        return "no daemon"
    envelope = json.dumps(daemon.get("release"), indent=2, sort_keys=True)
    return format_html(
        "bcd <strong>{}</strong><br><code>{}</code><br>sha256 <code>{}</code>"
        "<details><summary>signed release envelope</summary><pre>{}</pre></details>",
        daemon.get("version"),
        daemon.get("url"),
        daemon.get("sha256"),
        envelope,
    )
