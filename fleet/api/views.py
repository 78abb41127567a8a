"""The fleet (host) API for operators; the node agents' is in agent_views.py. Thin: parse, call one service, render."""

from __future__ import annotations

from typing import cast

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import InvalidInput, NotFound
from core.pagination import PaginatedViewMixin
from core.query import query_parameters
from fleet.api import serializers as s
from fleet.api.params import path_id, query_bool, query_id, query_text, valid_body
from fleet.api.schema import error_responses
from fleet.models import AuditEntry, Node, Pool, Scope, Tenant, Workflow
from fleet.services.audit import Actor
from fleet.services.iam import Principal
from fleet.services.labels import node_labels_set, node_selector_q, nodes_label
from fleet.services.nodes import node_create, node_list_q
from fleet.services.pools import pool_create, pool_update
from fleet.services.workflows import workflow_finish, workflow_start

# Any path segment reaches the view, so a malformed id is a JSON 404 rather than an unmatched URL.
ANY_SEGMENT = r"[^/]+"


#: Pools, nodes and workflows: read with ``read``, changed with ``nodes`` (docs/api.md#scopes).
FLEET_SCOPES = {
    **dict.fromkeys(["list", "retrieve"], Scope.READ),
    **dict.fromkeys(["create", "partial_update", "labels", "finish"], Scope.NODES),
}


class TenantViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """Everything is scoped to the caller's tenant: another tenant's object is 404. Lists are paginated."""

    lookup_value_regex = ANY_SEGMENT

    @property
    def tenant(self) -> Tenant:
        # The default ApiKeyAuthentication sets ``request.auth`` to the caller's Principal.
        return cast(Principal, self.request.auth).tenant

    key_scopes = FLEET_SCOPES

    @property
    def actor(self) -> Actor:
        return Actor.api(self.request.user, cast(Principal, self.request.auth).api_key)


class PoolViewSet(TenantViewSet):
    @extend_schema(
        responses={
            200: s.PoolSerializer(many=True),
            **error_responses("PoolList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        pools = Pool.objects.filter(tenant=self.tenant)
        return self.paginated_response(pools, lambda page: s.PoolSerializer(page, many=True).data)

    @extend_schema(responses={200: s.PoolSerializer, **error_responses("PoolRetrieve", not_found=["not_found"])})
    def retrieve(self, request: Request, pk: str) -> Response:
        pool = Pool.objects.filter(tenant=self.tenant, pk=path_id(pk, "pool")).first()
        if pool is None:
            raise NotFound(f"No pool {pk}.", code="not_found")
        return Response(s.PoolSerializer(pool).data)

    @extend_schema(
        request=s.PoolInSerializer,
        responses={
            201: s.PoolSerializer,
            **error_responses(
                "PoolCreate",
                json_body=True,
                bad_request=["invalid_input", "invalid_name", "invalid_budget", "invalid_window"],
                conflict=["pool_exists"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        data = valid_body(s.PoolInSerializer, request)
        policy = data.get("policy") or {}
        pool = pool_create(tenant=self.tenant, name=data["name"], actor=self.actor, **policy)
        return Response(s.PoolSerializer(pool).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.PoolPatchSerializer,
        responses={
            200: s.PoolSerializer,
            **error_responses(
                "PoolUpdate",
                json_body=True,
                bad_request=["invalid_input", "invalid_budget", "invalid_window"],
                not_found=["not_found"],
            ),
        },
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        """The policy fields given replace the pool's; nothing changes on a refusal (docs/api.md#pools)."""
        pool_id = path_id(pk, "pool")
        data = valid_body(s.PoolPatchSerializer, request)
        # Windows pass through as JSON: the service validates them once, for the admin too.
        pool = pool_update(tenant=self.tenant, pool_id=pool_id, policy=data["policy"], actor=self.actor)
        return Response(s.PoolSerializer(pool).data)


class NodeViewSet(TenantViewSet):
    def _nodes(self):
        return Node.objects.filter(tenant=self.tenant).select_related("session")

    def _node(self, pk: str) -> Response:
        node = self._nodes().filter(pk=path_id(pk, "node")).first()
        if node is None:
            raise NotFound(f"No node {pk}.", code="not_found")
        return Response(s.NodeSerializer(node, context={"now": timezone.now()}).data)

    @query_parameters(
        OpenApiParameter("poolId", str, description="only the nodes of this pool"),
        OpenApiParameter("selector", str, description="only the nodes whose labels match this selector"),
        OpenApiParameter("daemonVersion", str, description="only the nodes whose agent last reported this version"),
        OpenApiParameter("online", bool, description="`true`: only the online nodes; `false`: only the others"),
    )
    @extend_schema(
        responses={
            200: s.NodeSerializer(many=True),
            **error_responses("NodeList", bad_request=["invalid_input", "invalid_selector", "unknown_parameter"]),
        },
    )
    def list(self, request: Request) -> Response:
        nodes = self._nodes().filter(node_selector_q(request.query_params.get("selector")))
        now = timezone.now()
        # Filters combine (all must hold) and keep working across pages (docs/api.md#nodes).
        nodes = nodes.filter(
            node_list_q(
                pool_id=query_id(request, "poolId"),
                daemon_version=query_text(request, "daemonVersion"),
                online=query_bool(request, "online"),
                now=now,
            )
        )
        return self.paginated_response(nodes, lambda page: s.NodeSerializer(page, many=True, context={"now": now}).data)

    @extend_schema(responses={200: s.NodeSerializer, **error_responses("NodeRetrieve", not_found=["not_found"])})
    def retrieve(self, request: Request, pk: str) -> Response:
        return self._node(pk)

    @extend_schema(
        request=s.NodePatchSerializer,
        responses={
            200: s.NodeSerializer,
            **error_responses(
                "NodeUpdate", json_body=True, bad_request=["invalid_input", "invalid_labels"], not_found=["not_found"]
            ),
        },
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        """``labels`` replaces the node's whole label map; nothing changes on a refusal (docs/api.md#labels)."""
        node_id = path_id(pk, "node")
        data = valid_body(s.NodePatchSerializer, request)
        node_labels_set(tenant=self.tenant, node_id=node_id, labels=data["labels"], actor=self.actor)
        return self._node(pk)

    @extend_schema(
        request=s.NodesLabelInSerializer,
        responses={
            200: s.NodesLabeledSerializer,
            **error_responses(
                "NodesLabel",
                json_body=True,
                bad_request=["invalid_input", "invalid_labels", "invalid_selector", "unknown_pool"],
            ),
        },
    )
    @action(detail=False, methods=["post"], url_path="labels")
    def labels(self, request: Request) -> Response:
        """Every matching node gets ``set`` merged in and ``remove`` taken out, in one UPDATE (docs/api.md#labels)."""
        data = valid_body(s.NodesLabelInSerializer, request)
        matched = nodes_label(
            tenant=self.tenant,
            selector=data["selector"],
            pool_ids=data.get("poolIds"),
            set_labels=data.get("set"),
            remove=data.get("remove"),
            actor=self.actor,
        )
        return Response({"matched": matched})

    @extend_schema(
        request=s.NodeInSerializer,
        responses={
            201: s.NodeCreatedSerializer,
            **error_responses(
                "NodeCreate",
                json_body=True,
                bad_request=["invalid_input", "invalid_name", "invalid_arch", "invalid_labels", "unknown_pool"],
                conflict=["node_exists"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        data = valid_body(s.NodeInSerializer, request)
        node, agent_token = node_create(
            tenant=self.tenant,
            name=data["name"],
            pool_id=data["poolId"],
            arch=data["arch"],
            labels=data.get("labels"),
            actor=self.actor,
        )
        body = s.NodeCreatedSerializer(node, context={"agent_token": agent_token, "now": timezone.now()}).data
        return Response(body, status=status.HTTP_201_CREATED)


class WorkflowViewSet(TenantViewSet):
    def _workflow(self, pk: str) -> Workflow:
        workflow = Workflow.objects.filter(tenant=self.tenant, pk=path_id(pk, "workflow")).first()
        if workflow is None:
            raise NotFound(f"No workflow {pk}.", code="not_found")
        return workflow

    @query_parameters(
        OpenApiParameter("nodeId", str, description="only this node's workflows"),
        OpenApiParameter("state", str, enum=Workflow.State.values),
    )
    @extend_schema(
        responses={
            200: s.WorkflowSerializer(many=True),
            **error_responses("WorkflowList", bad_request=["invalid_input", "unknown_parameter"]),
        },
    )
    def list(self, request: Request) -> Response:
        workflows = Workflow.objects.filter(tenant=self.tenant)
        node_id = query_id(request, "nodeId")
        if node_id is not None:
            workflows = workflows.filter(node_id=node_id)
        state = request.query_params.get("state")
        if state is not None:
            if state not in Workflow.State.values:
                raise InvalidInput(f"state is one of {', '.join(Workflow.State.values)}.", code="invalid_input")
            workflows = workflows.filter(state=state)
        return self.paginated_response(workflows, lambda page: s.WorkflowSerializer(page, many=True).data)

    @extend_schema(
        responses={200: s.WorkflowSerializer, **error_responses("WorkflowRetrieve", not_found=["not_found"])}
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(s.WorkflowSerializer(self._workflow(pk)).data)

    @extend_schema(
        request=s.WorkflowInSerializer,
        responses={
            201: s.WorkflowSerializer,
            **error_responses(
                "WorkflowCreate",
                json_body=True,
                bad_request=["invalid_input", "unknown_node"],
                conflict=["budget_exhausted", "workflow_active"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        data = valid_body(s.WorkflowInSerializer, request)
        workflow = workflow_start(tenant=self.tenant, node_id=data["nodeId"], kind=data["kind"], actor=self.actor)
        return Response(s.WorkflowSerializer(workflow).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=None,
        responses={
            200: s.WorkflowSerializer,
            **error_responses("WorkflowFinish", not_found=["not_found"], conflict=["invalid_state"]),
        },
    )
    @action(detail=True, methods=["post"])
    def finish(self, request: Request, pk: str) -> Response:
        workflow = workflow_finish(tenant=self.tenant, workflow_id=path_id(pk, "workflow"), actor=self.actor)
        return Response(s.WorkflowSerializer(workflow).data)


class AuditListView(generics.ListAPIView):
    """The tenant's audit trail, newest first; ``?action=`` and ``?objectId=`` filter it.

    A plain ListAPIView, so it is paginated by the project's default pagination class.
    """

    serializer_class = s.AuditEntrySerializer
    key_scopes = {"get": Scope.READ}
    filter_backends: list = []
    ordering = ["-seq"]

    def get_queryset(self):
        entries = AuditEntry.objects.filter(tenant=cast(Principal, self.request.auth).tenant).order_by("-seq")
        for param, column in (("action", "action"), ("objectId", "object_id")):
            value = query_text(self.request, param)
            if value is not None:
                entries = entries.filter(**{column: value})
        return entries

    @query_parameters(
        OpenApiParameter("action", str, description="only entries of this action, e.g. rollout.pause"),
        OpenApiParameter("objectId", str, description="only entries about this object"),
    )
    @extend_schema(
        responses={
            200: s.AuditEntrySerializer(many=True),
            **error_responses("AuditList", bad_request=["invalid_input", "unknown_parameter"]),
        },
    )
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)
