"""The node-agent API (docs/api.md#the-node-agent-api): agent tokens only. Thin: parse, call one service, render."""

from __future__ import annotations

import functools
from typing import cast

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.api import serializers as s
from fleet.api.agent_auth import AgentTokenAuthentication, IsAgent
from fleet.api.agent_session import ANSWER_AT_ONCE_SCOPE_KEY, session_answer, session_answer_bytes, session_request
from fleet.api.params import path_id, valid_body
from fleet.api.schema import error_responses
from fleet.models import Node
from fleet.services.commands import command_ack
from fleet.services.sessions import SessionReport, agent_heartbeat, agent_session_leave, agent_session_report
from fleet.services.watch import session_hold
from fleet.tokens import token_hash


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]


def _agent_node(request: Request) -> Node:
    # IsAgent admits only a request whose ``request.auth`` is the agent token's Node.
    return cast(Node, request.auth)


def _plain_heartbeat(request: HttpRequest) -> HttpResponse | None:
    """The answer to a plain heartbeat, without DRF; None for anything else (DRF answers it, errors included).

    Only what AgentSessionView would answer 200 to is taken here: a Bearer token, a JSON body that the
    strict parser and AgentSessionInSerializer accept (``session_request``: the same checks, never looser),
    and an open session on the reported version (``agent_heartbeat``). The body limit is
    BodySizeLimitMiddleware's, as for DRF. A held request (``wait``) is held here by polling: this is the
    synchronous server's way; the production tier holds it in async code (fleet/watch/front.py).
    """
    parsed = session_request(
        authorization=request.META.get("HTTP_AUTHORIZATION"),
        content_type=request.content_type or "",
        accept=request.META.get("HTTP_ACCEPT", "*/*"),
        body=request.body,
    )
    if parsed is None:
        return None
    report = agent_heartbeat(
        token_hash=token_hash(parsed.token),
        daemon_version=parsed.daemon_version,
        protocol_version=parsed.protocol_version,
    )
    if report is None:
        return None
    report = _held(request, report, wait=parsed.wait, seen=parsed.seen)
    return HttpResponse(session_answer_bytes(report), content_type="application/json")


def _held(request: HttpRequest, report: SessionReport, *, wait: int | None, seen: str | None) -> SessionReport:
    """``report``, or (when it would repeat ``seen`` to a request with ``wait``) what the polling hold answers.

    Never under the async tier (fleet/watch/front.py): a request it hands to Django is answered at once, so that
    no request holds one of Django's threads and its database connection (the front holds what it answers).
    """
    if wait is None or seen != report.spec_revision or report.node_id is None:
        return report
    if request.META.get("asgi.scope", {}).get(ANSWER_AT_ONCE_SCOPE_KEY):
        return report
    return session_hold(node_id=report.node_id, seen=seen, wait=wait) or report


class AgentSessionView(AgentView):
    """Join, heartbeat, leave. A plain heartbeat (the hot path, docs/architecture.md#scale-targets) is answered
    before DRF's machinery (request wrapping, negotiation, serializers) by ``_plain_heartbeat``, in one SQL
    statement."""

    @classmethod
    def as_view(cls, **initkwargs):
        drf_view = super().as_view(**initkwargs)

        def view(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method == "POST":
                response = _plain_heartbeat(request)
                if response is not None:
                    return response
            return drf_view(request, *args, **kwargs)

        # Keeps cls, initkwargs (the schema generator reads them) and csrf_exempt.
        return functools.update_wrapper(view, drf_view)

    @extend_schema(
        request=s.AgentSessionInSerializer,
        responses={
            200: s.AgentSessionSerializer,
            **error_responses(
                "AgentSession",
                auth="agent",
                json_body=True,
                bad_request=["invalid_input"],
                unavailable=["refusal_not_recorded", "overloaded"],
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid_body(s.AgentSessionInSerializer, request)
        report = agent_session_report(
            node=_agent_node(request),
            daemon_version=data["daemonVersion"],
            protocol_version=data["protocolVersion"],
            refused=data.get("refused"),
        )
        return Response(session_answer(_held(request, report, wait=data.get("wait"), seen=data.get("seen"))))

    @extend_schema(
        request=None, responses={204: None, **error_responses("AgentLeave", auth="agent", unavailable=["overloaded"])}
    )
    def delete(self, request: Request) -> Response:
        agent_session_leave(node=_agent_node(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AgentCommandAckView(AgentView):
    @extend_schema(
        request=s.CommandAckInSerializer,
        responses={
            200: s.CommandSerializer,
            **error_responses(
                "CommandAck", auth="agent", json_body=True, bad_request=["invalid_input"], not_found=["not_found"]
            ),
        },
    )
    def post(self, request: Request, command_id: str) -> Response:
        command_uuid = path_id(command_id, "command")
        data = valid_body(s.CommandAckInSerializer, request)
        command = command_ack(
            node_id=_agent_node(request).id, command_id=command_uuid, ok=data["ok"], error=data.get("error") or ""
        )
        return Response(s.CommandSerializer(command).data)
