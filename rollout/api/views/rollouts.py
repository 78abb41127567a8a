"""Rollouts: create, read, act (docs/api.md#rollouts), and why not yet (docs/controller.md#why-not-yet)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import NotFound
from core.pagination import PaginatedViewMixin
from core.query import query_parameters, refuse_unknown_parameters
from fleet.interface import FleetAdminOrApprover, RolloutApprover
from rollout.api.filters import NodeUpgradeFilter, RolloutFilter
from rollout.api.schema import (
    DRY_RUN,
    error_responses,
)
from rollout.api.serializers import (
    AbortSerializer,
    ActionSerializer,
    ApproveSerializer,
    DenySerializer,
    NodeUpgradeSerializer,
    ResumeSerializer,
    RolloutCreateSerializer,
    RolloutEventSerializer,
    RolloutGateSerializer,
    RolloutPlanSerializer,
    RolloutSerializer,
)
from rollout.api.views.common import caller_actor, caller_principal, dry_run, represent_upgrades
from rollout.gates.verdicts import gate_json, gates_of
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.actions import (
    rollout_abort,
    rollout_pause,
    rollout_promote,
    rollout_resume,
    rollout_start,
    rollouts_for,
)
from rollout.rollouts.approvals import rollout_approve, rollout_deny
from rollout.rollouts.create import rollout_create, rollout_plan
from rollout.rollouts.representation import rollouts_json

ROLLOUT_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The rollout's id.")
ROLLOUT_ACTION_RESPONSES = {
    200: RolloutSerializer,
    **error_responses(
        "RolloutAction",
        json_body=True,
        bad_request=["invalid_input"],  # a comment that is not 0 to 500 characters, an unknown field
        not_found=["not_found"],
        conflict=["invalid_state"],
    ),
}
ROLLOUT_RESUME_RESPONSES = {
    200: RolloutSerializer,
    **error_responses(
        "RolloutResume",
        json_body=True,
        bad_request=["invalid_input", "invalid_schedule"],
        not_found=["not_found"],
        conflict=["invalid_state", "release_blocked", "deadline_passed"],
    ),
}


class RolloutViewSet(PaginatedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Wave rollouts of the caller's tenant. Another tenant's rollout is a 404."""

    serializer_class = RolloutSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = RolloutFilter
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    #: Approving and denying need compute:rollout:approve (compute:fleet:admin alone does not); an approver
    #: reads what they approve. Everything else needs compute:fleet:admin (docs/api.md#credentials).
    APPROVER_ACTIONS = frozenset({"approve", "deny"})
    READ_ACTIONS = frozenset({"list", "retrieve", "nodes", "node", "events"})

    def get_permissions(self) -> Sequence[Any]:
        if self.action in self.APPROVER_ACTIONS:
            return [RolloutApprover()]
        if self.action in self.READ_ACTIONS:
            return [FleetAdminOrApprover()]
        return super().get_permissions()

    def get_queryset(self) -> QuerySet[Rollout]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular: no caller, only the model
            return Rollout.objects.none()
        return rollouts_for(tenant=caller_principal(self.request).tenant)

    def get_object(self) -> Rollout:
        try:
            rollout_id = UUID(self.kwargs["pk"])
        except ValueError as exc:
            raise NotFound("No such rollout.") from exc
        return get_object_or_404(self.get_queryset(), pk=rollout_id)

    def _represent(self, rollouts: list[Rollout]) -> list[dict[str, Any]]:
        return rollouts_json(rollouts, now=timezone.now())

    @query_parameters(
        OpenApiParameter("state", str, enum=Rollout.State.values, description="only rollouts in this state")
    )
    @extend_schema(
        responses={
            200: RolloutSerializer(many=True),
            **error_responses("RolloutList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        # Waves are built for the page's rollouts only: a constant number of queries per page.
        return self.paginated_response(self.filter_queryset(self.get_queryset()), self._represent)

    @extend_schema(
        parameters=[ROLLOUT_ID],
        responses={200: RolloutSerializer, **error_responses("RolloutRetrieve", not_found=["not_found"])},
    )
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(self._represent([self.get_object()])[0])

    def _fresh(self, rollout_id: UUID) -> dict[str, Any]:
        return self._represent([self.get_queryset().get(pk=rollout_id)])[0]

    def _action(self, request: Request) -> dict[str, Any]:
        """What pause, start and promote are given: the rollout, its tenant, who asks, and their comment."""
        serializer = ActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return {
            "rollout_id": self.get_object().id,
            "tenant": caller_principal(request).tenant,
            "actor": caller_actor(request),
            "comment": serializer.validated_data.get("comment"),
        }

    @query_parameters(DRY_RUN)
    @extend_schema(
        request=RolloutCreateSerializer,
        responses={
            201: OpenApiResponse(RolloutSerializer, description="Created: the rollout."),
            200: OpenApiResponse(RolloutPlanSerializer, description="`?dryRun=true`: the plan; nothing written."),
            **error_responses(
                "RolloutCreate",
                json_body=True,
                bad_request=[
                    "invalid_input",
                    "unknown_parameter",
                    "invalid_waves",
                    "unknown_version",
                    "unknown_pool",
                    "no_nodes",
                    "release_blocked",
                    "invalid_gate",
                    "binary_missing",
                    "sequence_rollback",
                    "invalid_selector",
                    "invalid_schedule",
                    "invalid",
                    "supersede_invalid",
                ],
                not_found=["not_found"],
                conflict=["conflict"],
                unavailable=["no_downloads_url"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        # A create writes: a misspelt ``?dryrun=true`` must not create for real (docs/api.md#lists).
        refuse_unknown_parameters(request, self)
        planning = dry_run(request)
        serializer = RolloutCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        tenant = caller_principal(request).tenant
        spec = serializer.spec()
        if planning:
            plan = rollout_plan(tenant=tenant, spec=spec)
            return Response(RolloutPlanSerializer(plan).data, status=status.HTTP_200_OK)
        rollout = rollout_create(
            tenant=tenant, spec=spec, created_by=caller_principal(request).user, actor=caller_actor(request)
        )
        return Response(self._fresh(rollout.id), status=status.HTTP_201_CREATED)

    @query_parameters(
        OpenApiParameter("state", str, enum=NodeUpgrade.State.values, description="only nodes in this state"),
        OpenApiParameter("wave", int, description="only nodes of this wave (0-based)"),
    )
    @extend_schema(
        filters=False,
        parameters=[ROLLOUT_ID],
        responses={
            200: NodeUpgradeSerializer(many=True),
            **error_responses(
                "RolloutNodes", bad_request=["invalid_input", "unknown_parameter"], not_found=["not_found"]
            ),
        },
    )
    @action(detail=True, methods=["get"])
    def nodes(self, request: Request, pk: str | None = None) -> Response:
        rollout = self.get_object()
        upgrades = NodeUpgradeFilter(
            request.query_params, queryset=NodeUpgrade.objects.filter(rollout=rollout).order_by("position")
        )
        if not upgrades.is_valid():
            raise ValidationError(upgrades.errors)
        return self.paginated_response(upgrades.qs.select_related("rollout"), represent_upgrades)

    @extend_schema(
        parameters=[
            ROLLOUT_ID,
            OpenApiParameter("node_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The node's id."),
        ],
        responses={200: NodeUpgradeSerializer, **error_responses("RolloutNode", not_found=["not_found"])},
    )
    @action(detail=True, methods=["get"], url_path=r"nodes/(?P<node_id>[^/]+)")
    def node(self, request: Request, pk: str | None = None, node_id: str | None = None) -> Response:
        """One node's row of the rollout, with its blocker; 404 when the rollout has no such node.

        See docs/controller.md#why-not-yet."""
        rollout = self.get_object()
        try:
            node_uuid = UUID(str(node_id))
        except ValueError as exc:
            raise NotFound("No such node in this rollout.") from exc
        upgrade = NodeUpgrade.objects.filter(rollout=rollout, node_id=node_uuid).select_related("rollout").first()
        if upgrade is None:
            raise NotFound("No such node in this rollout.")
        return Response(represent_upgrades([upgrade])[0])

    @extend_schema(
        filters=False,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutEventSerializer(many=True),
            **error_responses(
                "RolloutEvents", bad_request=["invalid_input", "unknown_parameter"], not_found=["not_found"]
            ),
        },
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        rollout = self.get_object()
        events = rollout.events.order_by("at", "id")
        return self.paginated_response(events, lambda page: RolloutEventSerializer(page, many=True).data)

    @extend_schema(
        filters=False,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutGateSerializer(many=True),
            **error_responses("RolloutGates", bad_request=["unknown_parameter"], not_found=["not_found"]),
        },
        description="Each gate's latest result, in the order given at create (at most 8: not paged).",
    )
    @action(detail=True, methods=["get"], pagination_class=None)  # a plain list: at most 8 gates
    def gates(self, request: Request, pk: str | None = None) -> Response:
        refuse_unknown_parameters(request, self)  # a list, though not paged: the lists' rule (core/query.py)
        return Response([gate_json(gate) for gate in gates_of(self.get_object())])

    @extend_schema(request=ActionSerializer, parameters=[ROLLOUT_ID], responses=ROLLOUT_ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_pause(**self._action(request))
        return Response(self._fresh(rollout.id))

    @extend_schema(request=ResumeSerializer, parameters=[ROLLOUT_ID], responses=ROLLOUT_RESUME_RESPONSES)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        serializer = ResumeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rollout = rollout_resume(
            rollout_id=self.get_object().id,
            tenant=caller_principal(request).tenant,
            actor=caller_actor(request),
            end_by=serializer.validated_data.get("endBy"),
            comment=serializer.validated_data.get("comment"),
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=ActionSerializer,
        parameters=[ROLLOUT_ID],
        responses=ROLLOUT_ACTION_RESPONSES,
        description="Start a scheduled rollout now (`rollout.started`); 409 `invalid_state` unless it is scheduled.",
    )
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_start(**self._action(request))
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=ActionSerializer,
        parameters=[ROLLOUT_ID],
        responses=ROLLOUT_ACTION_RESPONSES,
        description="End the current wave's soak now: the next wave starts at the next tick (`rollout.promoted`, "
        "then `rollout.wave`). 409 `invalid_state` unless the rollout is active and its current wave is soaking "
        "(settled, not the last wave, the next one not yet due).",
    )
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_promote(**self._action(request))
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=AbortSerializer,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutSerializer,
            **error_responses(
                "RolloutAbort",
                json_body=True,
                bad_request=["invalid_input"],
                not_found=["not_found"],
                conflict=["invalid_state"],
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str | None = None) -> Response:
        serializer = AbortSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rollout = rollout_abort(
            rollout_id=self.get_object().id,
            tenant=caller_principal(request).tenant,
            rollback=serializer.validated_data["rollback"],
            actor=caller_actor(request),
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=ApproveSerializer,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutSerializer,
            **error_responses(
                "RolloutApprove",
                json_body=True,
                bad_request=["invalid_input"],
                forbidden=["self_approval"],
                not_found=["not_found"],
                conflict=["already_approved", "invalid_state"],
            ),
        },
        description="Approve a rollout awaiting approval (needs `compute:rollout:approve`). When as many users "
        "other than its creator as its `approvalsRequired` have approved, it starts (`rollout.approved`).",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        serializer = ApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        principal = caller_principal(request)
        rollout = rollout_approve(
            rollout_id=self.get_object().id,
            tenant=principal.tenant,
            user=principal.user,
            comment=serializer.validated_data.get("comment"),
            actor=caller_actor(request),
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=DenySerializer,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutSerializer,
            **error_responses(
                "RolloutDeny",
                json_body=True,
                bad_request=["invalid_input"],
                not_found=["not_found"],
                conflict=["invalid_state"],
            ),
        },
        description="Deny a rollout awaiting approval (needs `compute:rollout:approve`): it ends `denied` and "
        "its nodes are free (`rollout.denied`).",
    )
    @action(detail=True, methods=["post"])
    def deny(self, request: Request, pk: str | None = None) -> Response:
        serializer = DenySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rollout = rollout_deny(
            rollout_id=self.get_object().id,
            tenant=caller_principal(request).tenant,
            comment=serializer.validated_data["comment"],
            actor=caller_actor(request),
        )
        return Response(self._fresh(rollout.id))
