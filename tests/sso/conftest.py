"""Fixtures of the SSO tests: a real OpenID Connect provider in a second process (tests/sso/provider/), the
console configured for it, and the sign-in's redirect dance over real HTTP (httpx following every hop).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from demo.processes import BASE_DIR, free_port, stop, wait_until
from fleet.sso.discovery import forget_metadata

CLIENT_ID = "rollout-console"
CLIENT_SECRET = "console-secret-for-tests"
PASSWORD = "provider-password"
ROLE_MAP = "sre=acme:compute:fleet:admin,sre-leads=acme:compute:rollout:approve"


@dataclass
class Provider:
    issuer: str
    env: dict[str, str]
    private_pem: bytes

    def tool(self, *args: str) -> None:
        """Run tests/sso/provider/tool.py in the provider's environment (its own database)."""
        subprocess.run(
            [sys.executable, "-m", "tests.sso.provider.tool", *args], cwd=BASE_DIR, env=self.env, check=True, timeout=60
        )

    def user(self, name: str, *groups: str) -> None:
        """``name`` at the provider, with exactly ``groups``."""
        self.tool("user", name, PASSWORD, *groups)


@pytest.fixture(scope="session")
def provider(tmp_path_factory) -> Iterator[Provider]:
    """django-oauth-toolkit's OIDC provider on ``localhost`` (its own database and RS256 key, made here)."""
    folder = tmp_path_factory.mktemp("oidc-provider")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (folder / "key.pem").write_bytes(pem)
    name = f"{os.environ.get('ROLLOUT_PG_DB', 'rollout')}_oidc_provider{os.environ.get('PYTEST_XDIST_WORKER', '')}"
    shared = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout").rsplit("/", 1)[0]
    with psycopg.connect(f"{shared}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    port = free_port()
    issuer = f"http://localhost:{port}/o"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.sso.provider.settings",
        "PROVIDER_DATABASE_URL": f"{shared}/{name}",
        "PROVIDER_ISSUER": issuer,
        "PROVIDER_KEY_FILE": str(folder / "key.pem"),
    }
    subprocess.run([sys.executable, "-m", "django", "migrate", "-v0"], cwd=BASE_DIR, env=env, check=True, timeout=120)
    log = (folder / "provider.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "-w", "1", "--threads", "4",
         "tests.sso.provider.wsgi:application"],
        # Run from its folder: gunicorn would read the project's gunicorn.conf.py (uvicorn workers) from BASE_DIR.
        cwd=folder, env={**env, "PYTHONPATH": str(BASE_DIR)}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip

    def answers() -> bool:
        try:
            return httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, timeout=60, what="the test OIDC provider")
        yield Provider(issuer=issuer, env=env, private_pem=pem)
    finally:
        stop(process)
        log.close()
        with psycopg.connect(f"{shared}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def console(provider, live_server, settings, tenant) -> Iterator[str]:
    """The console (the live server) signing in through ``provider``; its base URL. Tenant ``acme`` exists."""
    provider.tool("client", CLIENT_ID, CLIENT_SECRET, f"{live_server.url}/admin/sso/callback/")
    settings.OIDC_ISSUER_URL = provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_NAME = "Test IdP"
    settings.OIDC_ROLE_MAP = ROLE_MAP
    settings.OIDC_SESSION_MAX_AGE = 600
    settings.AUTHENTICATION_BACKENDS = [
        "fleet.sso.backend.ConsoleOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    forget_metadata()
    yield live_server.url
    forget_metadata()


_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def start(http: httpx.Client, base: str) -> httpx.Response:
    """From the console's "Sign in with" link to the provider's login form (every redirect followed)."""
    page = http.get(f"{base}/admin/sso/start/?next=/admin/")
    assert page.status_code == 200, page.text[:500]
    assert 'id="sign-in"' in page.text, page.text[:500]
    return page


def submit_login(http: httpx.Client, page: httpx.Response, username: str, *, follow: bool = True) -> httpx.Response:
    """Submit the provider's login form; the redirects (``follow``) lead back to the console's callback and on."""
    token = _CSRF.search(page.text)
    assert token, page.text[:500]
    next_url = re.search(r'name="next" value="([^"]*)"', page.text)
    return http.post(
        str(page.url),
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": PASSWORD,
            "next": (next_url.group(1) if next_url else "").replace("&amp;", "&"),
        },
        follow_redirects=follow,
    )


def sign_in(base: str, username: str) -> tuple[httpx.Client, httpx.Response]:
    """The whole sign-in over HTTP: a fresh browser-like client and the page it ends on."""
    http = httpx.Client(follow_redirects=True, timeout=30)
    return http, submit_login(http, start(http, base), username)


def signed_in_to_console(http: httpx.Client, base: str) -> bool:
    """Does this client's session open the console's index (not a redirect to the login page)?"""
    response = http.get(f"{base}/admin/", follow_redirects=False)
    return response.status_code == 200
