"""The authentication backend: mozilla-django-oidc's code exchange, with the ID token checked in full.

mozilla-django-oidc fetches the token, the JWKS and the userinfo and checks the signature and the
nonce; this subclass takes the provider's endpoints from its discovery document, also checks the
token's issuer, audience and times (``exp``, ``iat``, with ``CLOCK_SKEW_SECONDS`` of leeway), and
hands the claims to ``fleet.services.sso.sso_user_sync``. Every failure is a ``SignInRefused``
that the callback view shows and audits.
"""

from __future__ import annotations

from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from fleet.services.sso import SignInRefused, sso_user_sync
from fleet.sso.config import CLOCK_SKEW_SECONDS, issuer, role_rules, sso_enabled
from fleet.sso.discovery import DiscoveryError, provider_metadata

#: What each PyJWT refusal means to the person signing in (the first that matches).
_TOKEN_FAILURES: tuple[tuple[type[Exception], str, str], ...] = (
    (jwt.ExpiredSignatureError, "token_expired", "The identity provider's token has expired."),
    (jwt.InvalidIssuerError, "wrong_issuer", "The token was issued by another identity provider."),
    (jwt.InvalidAudienceError, "wrong_audience", "The token was issued for another application."),
    (jwt.ImmatureSignatureError, "token_not_yet_valid", "The token is not valid yet (check the clocks)."),
    (jwt.InvalidIssuedAtError, "token_not_yet_valid", "The token is not valid yet (check the clocks)."),
    (jwt.MissingRequiredClaimError, "token_incomplete", "The token lacks a required claim."),
    (jwt.InvalidSignatureError, "bad_signature", "The token's signature does not verify."),
)


def username_from_claims(claims: dict[str, Any]) -> str:
    """The console user's name: ``preferred_username``, else ``email``, else ``sub`` (at most 150 characters)."""
    for claim in ("preferred_username", "email", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()[:150]
    return ""


def groups_from_claims(claims: dict[str, Any]) -> list[str]:
    """The ``OIDC_GROUPS_CLAIM`` claim as a list of names (a single string counts as one group)."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM or "groups", [])
    if isinstance(value, str):
        return [value]
    return [str(group) for group in value] if isinstance(value, list) else []


class ConsoleOIDCBackend(OIDCAuthenticationBackend):
    """``AUTHENTICATION_BACKENDS``' SSO entry; permissions are ModelBackend's (as for local users)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the parent's __init__: it reads the endpoints from settings, and ours come from discovery,
        # which must not be fetched when Django builds the backend for every request's get_user().
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    @staticmethod
    def _endpoint(name: str) -> str:
        try:
            return str(provider_metadata().get(name) or "")
        except DiscoveryError as exc:
            raise SignInRefused("provider_unreachable", str(exc)) from exc

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return self._endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return self._endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return self._endpoint("jwks_uri")

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        # The redirect URI the authorization request named (OIDC_REDIRECT_URI when set; views.py).
        if settings.OIDC_REDIRECT_URI:
            payload = {**payload, "redirect_uri": settings.OIDC_REDIRECT_URI}
        return super().get_token(payload)

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        # Only the callback view passes a nonce: a password form posted with ?code=&state= is not a sign-in.
        if not sso_enabled() or kwargs.get("nonce") is None:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            raise SignInRefused("provider_error", f"The identity provider refused the code exchange: {exc}") from exc
        except (SuspiciousOperation, jwt.PyJWTError, KeyError) as exc:
            raise SignInRefused("bad_token", f"The identity provider's token was refused: {exc}") from exc

    def _verify_jws(self, payload: Any, key: Any) -> dict[str, Any]:
        """The signature (the parent found the key in the JWKS), issuer, audience and times."""
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SignInRefused(
                "bad_signature", f"The token is signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}."
            )
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                # The issuer exactly as the provider names it (discovery checked it is OIDC_ISSUER_URL's, a
                # trailing slash aside): Auth0 and Entra ID's v1 issuers end in one, and the token's ``iss`` too.
                issuer=str(provider_metadata().get("issuer") or issuer()),
                leeway=CLOCK_SKEW_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            for kind, reason, detail in _TOKEN_FAILURES:
                if isinstance(exc, kind):
                    raise SignInRefused(reason, detail) from exc
            raise SignInRefused("bad_token", f"The token does not verify: {exc}.") from exc

    def verify_token(self, token: Any, **kwargs: Any) -> dict[str, Any]:
        payload = self.get_payload_data(token, self.retrieve_matching_jwk(token))
        if kwargs.get("nonce") is None or payload.get("nonce") != kwargs["nonce"]:
            raise SignInRefused("bad_nonce", "The token does not answer this sign-in (its nonce differs).")
        return payload

    def get_userinfo(self, access_token: Any, id_token: Any, payload: dict[str, Any]) -> dict[str, Any]:
        """The userinfo endpoint's claims under the ID token's (which are signed and win)."""
        claims: dict[str, Any] = {}
        if self.OIDC_OP_USER_ENDPOINT:
            claims = super().get_userinfo(access_token, id_token, payload)
            if claims.get("sub") != payload.get("sub"):
                raise SignInRefused("bad_token", "The userinfo answer is about another user than the token.")
        return {**claims, **payload}

    def get_or_create_user(self, access_token: Any, id_token: Any, payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        username = username_from_claims(claims)
        groups = groups_from_claims(claims)
        email = claims.get("email") if isinstance(claims.get("email"), str) else ""
        user = sso_user_sync(username=username, email=email or "", groups=groups, rules=role_rules())
        if user is None or not user.is_staff:
            raise SignInRefused(
                "no_access",
                f"You are {username} at the identity provider, but none of your groups "
                f"({', '.join(groups) or 'none'}) gives access to the console.",
                username,
            )
        return user
