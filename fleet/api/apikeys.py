"""The caller's own API keys (docs/api.md#api-keys): list, make one no wider than the calling key, revoke."""

from __future__ import annotations

from typing import Any, cast

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from core.fields import StrictSerializer
from core.pagination import PaginatedViewMixin
from core.times import api_datetime
from fleet.api.params import valid_body
from fleet.api.permissions import KeyHolder
from fleet.api.schema import error_responses
from fleet.api.scopes import ANY_SCOPE
from fleet.models import ApiKey, Scope
from fleet.services.apikeys import KeyRequest, api_key_issue, api_key_revoke, api_keys_of
from fleet.services.audit import Actor
from fleet.services.iam import Principal


class ApiKeySerializer(serializers.Serializer):
    """A key as its owner sees it: never the key or its hash."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters, to recognise it.")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices))
    expiresAt = serializers.DateTimeField(allow_null=True, help_text="null: the key never expires.")
    createdAt = serializers.DateTimeField()
    lastUsedAt = serializers.DateTimeField(allow_null=True, help_text="Written at most once a minute.")
    revokedAt = serializers.DateTimeField(allow_null=True)


class ApiKeyCreatedSerializer(serializers.Serializer):
    """The answer to a create: the key itself, shown this once."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices))
    expiresAt = serializers.DateTimeField(allow_null=True)
    createdAt = serializers.DateTimeField()
    key = serializers.CharField(help_text="The plain key: shown in this answer only.")


class ApiKeyInSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, help_text="What the key is for (a pipeline, a person).")
    # Checked by the service (unknown_scope, scope_too_wide): 400 naming ``scopes``.
    scopes = serializers.ListField(child=serializers.CharField(max_length=32), max_length=16)
    expiresAt = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="No later than the calling key's, within API_KEY_MAX_LIFETIME; absent: the latest those allow "
        "(none when neither bounds it); null: no expiry.",
    )


def api_key_json(api_key: ApiKey) -> dict[str, Any]:
    return {
        "id": api_key.pk,
        "name": api_key.name,
        "prefix": api_key.prefix,
        "scopes": list(api_key.scopes),
        "expiresAt": api_datetime(api_key.expires_at),
        "createdAt": api_datetime(api_key.created_at),
        "lastUsedAt": api_datetime(api_key.last_used_at),
        "revokedAt": api_datetime(api_key.revoked_at),
    }


class ApiKeyViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """The calling user's keys; another user's key is a 404. Any key of the user, whatever its grants."""

    permission_classes = [KeyHolder]
    lookup_value_regex = "[^/]+"
    # Any key may make a narrower key for its user and revoke its user's keys (docs/api.md#scopes): a pipeline's
    # key rotates itself whatever its scopes.
    key_scopes = {"list": Scope.READ, "create": ANY_SCOPE, "destroy": ANY_SCOPE}

    @property
    def principal(self) -> Principal:
        return cast(Principal, self.request.auth)

    @extend_schema(
        responses={
            200: ApiKeySerializer(many=True),
            **error_responses("ApiKeyList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        keys = api_keys_of(user=self.principal.user)
        return self.paginated_response(keys, lambda page: [api_key_json(key) for key in page])

    @extend_schema(
        request=ApiKeyInSerializer,
        responses={
            201: ApiKeyCreatedSerializer,
            **error_responses(
                "ApiKeyCreate",
                json_body=True,
                bad_request=["invalid_input", "unknown_scope", "scope_too_wide", "expiry_in_past", "expiry_too_late"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        body = valid_body(ApiKeyInSerializer, request)
        wanted = KeyRequest(
            name=body["name"], scopes=body["scopes"], expires_at=body.get("expiresAt"), expiry_given="expiresAt" in body
        )
        api_key, plain = api_key_issue(principal=self.principal, request=wanted, now=timezone.now())
        answer = {key: value for key, value in api_key_json(api_key).items() if key not in {"lastUsedAt", "revokedAt"}}
        return Response({**answer, "key": plain}, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH, description="The key's id.")],
        responses={204: None, **error_responses("ApiKeyRevoke", not_found=["not_found"])},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        principal = self.principal
        api_key_revoke(
            user=principal.user, api_key_id=pk, actor=Actor.api(principal.user, principal.api_key), now=timezone.now()
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
