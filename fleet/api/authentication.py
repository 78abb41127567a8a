"""``Authorization: Bearer <token>``: API keys for operators and automation (agent tokens: agent_auth.py)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from fleet.services.apikeys import KeyExpired, api_key_authenticate
from fleet.services.iam import Principal
from fleet.tokens import bearer_token


class BearerAuthentication(authentication.BaseAuthentication):
    """A bearer token; subclasses say what it is (``credential``) and look it up (``lookup``)."""

    keyword = "Bearer"
    credential = "token"
    unknown_message = "Unknown token."

    def lookup(self, token: str) -> tuple[object, object] | None:
        """``(request.user, request.auth)`` for this token, or None when it is unknown."""
        raise NotImplementedError

    def authenticate(self, request: Request) -> tuple[object, object] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        token = bearer_token(header)
        if token is None:
            raise exceptions.AuthenticationFailed(f"Use 'Authorization: Bearer <{self.credential}>'.")
        found = self.lookup(token)
        if found is None:
            raise exceptions.AuthenticationFailed(self.unknown_message)
        return found

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class ApiKeyAuthentication(BearerAuthentication):
    """``request.auth`` is the key's Principal; an expired key: 401 ``key_expired``."""

    credential = "key"
    unknown_message = "Unknown or revoked API key."

    def lookup(self, token: str) -> tuple[object, Principal] | None:
        try:
            principal = api_key_authenticate(plain_key=token, now=timezone.now())
        except KeyExpired as exc:
            raise exceptions.AuthenticationFailed(exc.detail, code=exc.code) from exc
        return None if principal is None else (principal.user, principal)
