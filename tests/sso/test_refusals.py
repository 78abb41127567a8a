"""Sign-ins refused (docs/operations.md#single-sign-on): no session, a page saying why, an audit entry.

The provider is the real one; for the token checks its ID token is re-signed on its way back to the
console (the provider's own key, its kid kept) with one claim changed, so that only that check can fail.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model

from fleet.models import AuditEntry
from fleet.sso.backend import ConsoleOIDCBackend
from tests.sso.conftest import sign_in, signed_in_to_console, start, submit_login


def _other_key() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encoding, private = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(encoding, private, serialization.NoEncryption())


def tamper(monkeypatch, *, changes: dict[str, Any], key: bytes) -> None:
    """The provider's ID token re-signed with ``key`` (its kid kept), ``changes`` applied to its claims."""
    original = ConsoleOIDCBackend.get_token

    def get_token(self, payload):
        answer = original(self, payload)
        header = jwt.get_unverified_header(answer["id_token"])
        claims = jwt.decode(answer["id_token"], options={"verify_signature": False})
        answer["id_token"] = jwt.encode({**claims, **changes}, key, algorithm="RS256", headers={"kid": header["kid"]})
        return answer

    monkeypatch.setattr(ConsoleOIDCBackend, "get_token", get_token)


def assert_refused(
    page: httpx.Response, http: httpx.Client, console: str, reason: str, status: int = 403, *, audited: bool = True
) -> None:
    """A refusal page with ``reason``, no session, and (``audited``) the audit entry; else none at all."""
    assert page.status_code == status, page.text[:800]
    assert f'data-reason="{reason}"' in page.text
    assert "Sign-in refused" in page.text
    assert not signed_in_to_console(http, console)
    if not audited:  # a callback nobody here asked for: anyone can send it, so it is logged, not audited
        assert not AuditEntry.objects.filter(action="user.sso_refused").exists()
        return
    entry = AuditEntry.objects.get(action="user.sso_refused")
    assert entry.after["reason"] == reason
    assert entry.tenant is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iss": "https://another-issuer.example"}, "wrong_issuer"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "token_expired"),
        ({"aud": "another-client"}, "wrong_audience"),
        ({"nonce": "not-the-one-we-sent"}, "bad_nonce"),
        ({"iat": int(time.time()) + 3600, "exp": int(time.time()) + 7200}, "token_not_yet_valid"),
    ],
)
def test_a_token_failing_a_check_gives_no_session(console, provider, monkeypatch, changes, reason):
    provider.user("dave", "sre")
    tamper(monkeypatch, changes=changes, key=provider.private_pem)
    http, page = sign_in(console, "dave")
    assert_refused(page, http, console, reason)
    assert not get_user_model().objects.filter(username="dave").exists()


def test_a_token_signed_by_another_key_gives_no_session(console, provider, monkeypatch):
    provider.user("dave", "sre")
    tamper(monkeypatch, changes={}, key=_other_key())
    http, page = sign_in(console, "dave")
    assert_refused(page, http, console, "bad_signature")


def test_the_clock_skew_is_bounded(console, provider, monkeypatch):
    """Expired 30 s ago is within the 60 s leeway; see the parametrized test for an hour."""
    provider.user("erin", "sre")
    tamper(monkeypatch, changes={"exp": int(time.time()) - 30}, key=provider.private_pem)
    http, page = sign_in(console, "erin")
    assert str(page.url) == f"{console}/admin/"
    assert signed_in_to_console(http, console)


def callback_url(console: str, username: str) -> tuple[httpx.Client, str]:
    """Sign in at the provider and follow its redirects by hand up to (not into) the console's callback."""
    http = httpx.Client(follow_redirects=True, timeout=30)
    answer = submit_login(http, start(http, console), username, follow=False)
    while not (target := str(answer.url.join(answer.headers["location"]))).startswith(f"{console}/admin/sso/"):
        answer = http.get(target, follow_redirects=False)
    return http, target


def test_a_forged_state_is_refused(console, provider):
    provider.user("frank", "sre")
    http, callback = callback_url(console, "frank")
    page = http.get(httpx.URL(callback).copy_set_param("state", "forged-state"))
    assert_refused(page, http, console, "state_mismatch", status=400, audited=False)
    assert not get_user_model().objects.filter(username="frank").exists()


def test_a_replayed_callback_is_refused(console, provider):
    provider.user("grace", "sre")
    http, callback = callback_url(console, "grace")
    assert http.get(callback, follow_redirects=False).headers["location"] == "/admin/"
    # The same answer again, from another browser (no state there) and from the same one (its state used up).
    stranger = httpx.Client(follow_redirects=False, timeout=30)
    assert_refused(stranger.get(callback), stranger, console, "state_mismatch", status=400, audited=False)
    assert http.get(callback, follow_redirects=False).status_code == 400


def test_a_discovery_document_naming_another_issuer_is_refused(console, provider, settings):
    """The same provider asked under another name: its document names ``localhost``, not ``127.0.0.1``."""
    settings.OIDC_ISSUER_URL = provider.issuer.replace("localhost", "127.0.0.1")
    http = httpx.Client(follow_redirects=True, timeout=30)
    page = http.get(f"{console}/admin/sso/start/")
    assert_refused(page, http, console, "provider_unreachable", status=502)
    assert "names the issuer" in page.text
