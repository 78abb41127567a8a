"""The caller's tenant (docs/api.md#the-tenant): read-only, its settings changed by no API key."""

from __future__ import annotations

from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.api.permissions import FleetAdminOrApprover
from fleet.api.schema import error_responses
from fleet.api.serializers import TenantSerializer
from fleet.models import Scope
from fleet.services.iam import Principal


class TenantView(APIView):
    """The caller's tenant and its settings (``rolloutApprovals``), for a key with either grant. Only GET:
    a superuser (the admin) or ``manage.py settenant`` changes them."""

    permission_classes = [FleetAdminOrApprover]
    key_scopes = {"get": Scope.READ}

    @extend_schema(responses={200: TenantSerializer, **error_responses("Tenant")})
    def get(self, request: Request) -> Response:
        return Response(TenantSerializer(cast(Principal, request.auth).tenant).data)
