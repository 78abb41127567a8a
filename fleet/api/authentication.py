"""``Authorization: Bearer <key>`` for operators and automation."""

from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from fleet.services.iam import Principal, principal_for_key
from fleet.tokens import bearer_token


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[object, Principal] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        token = bearer_token(header)
        if token is None:
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <key>'.")
        principal = principal_for_key(token)
        if principal is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API key.")
        return principal.user, principal

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
