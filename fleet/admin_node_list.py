"""The console's node list: its filters (online, version, a label selector in the API's grammar) and its columns
(labels as chips, online beside the last heartbeat, the agent's version beside its protocol). Display and
filtering only: the rules are the services' (``node_list_q``, ``node_selector_q``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.models import Node, NodeSession
from fleet.services.labels import node_selector_q
from fleet.services.nodes import node_is_online, node_list_q, node_session


def labels_chips(labels: dict[str, str] | None) -> SafeString | str:
    """A node's labels as chips, ``key=value`` each, in key order (``-`` when it has none)."""
    if not labels:
        return "-"
    return format_html(
        '<span class="console-chips">{}</span>',
        format_html_join(
            "", '<span class="console-chip"><b>{}</b>={}</span>', sorted((str(k), str(v)) for k, v in labels.items())
        ),
    )


def seen_text(node: Node) -> SafeString:
    """Online or offline (the API's rule), and when its agent last heartbeated."""
    session = node_session(node)
    online = node_is_online(node=node, now=timezone.now())
    last = date_format(timezone.localtime(session.last_seen_at), "DATETIME_FORMAT") if session else "never"
    return format_html(
        '<span class="console-nowrap"><span class="console-dot{}"></span>{}</span>'
        '<span class="console-muted">{}</span>',
        " console-dot-on" if online else "",
        "online" if online else "offline",
        last,
    )


class OnlineFilter(admin.SimpleListFilter):
    title = "online"
    parameter_name = "online"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "online"), ("no", "offline")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> QuerySet[Node]:
        if self.value() not in ("yes", "no"):
            return queryset
        return queryset.filter(node_list_q(online=self.value() == "yes", now=timezone.now()))


class VersionFilter(admin.SimpleListFilter):
    """The version the node's agent last reported (``daemonVersion`` in the API)."""

    title = "daemon version"
    parameter_name = "version"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        nodes = model_admin.get_queryset(request)
        versions = (
            NodeSession.objects.filter(node__in=nodes).order_by().values_list("daemon_version", flat=True).distinct()
        )
        return [(version, version) for version in sorted(versions)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> QuerySet[Node]:
        if not self.value():
            return queryset
        return queryset.filter(node_list_q(daemon_version=self.value(), now=timezone.now()))


class SelectorFilter(admin.SimpleListFilter):
    """A label selector in the API's grammar (``zone=eu-1,ring in (canary)``, docs/api.md#selectors); a selector
    that does not parse lists no node and says where it stops."""

    title = "labels (selector)"
    parameter_name = "selector"
    template = "admin/fleet/node/selector_filter.html"

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        # The other filters of the page, kept when the box is submitted (a new selector starts at page 1).
        self.kept_params = [
            (key, value)
            for key, values in request.GET.lists()
            if key not in (self.parameter_name, "p", "e")
            for value in values
        ]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("", "")]  # shown whatever the data: the box is the filter

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> QuerySet[Node]:
        text = self.value()
        if not text:
            return queryset
        try:
            return queryset.filter(node_selector_q(text))
        except DomainError as exc:
            messages.error(request, f"Label {exc.detail} No node is listed.")
            return queryset.none()
