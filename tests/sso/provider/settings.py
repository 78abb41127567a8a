"""Settings of the test provider (tests/sso/provider/__init__.py), from the environment the test sets."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

SECRET_KEY = "test-provider-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.sso.provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": dj_database_url.parse(os.environ["PROVIDER_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# Its own cookie names besides its own host name: the console's session is never touched.
SESSION_COOKIE_NAME = "provider_session"
CSRF_COOKIE_NAME = "provider_csrf"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a test provider: fast
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": os.environ.get("PROVIDER_ISSUER", ""),
    "OIDC_RSA_PRIVATE_KEY": Path(os.environ["PROVIDER_KEY_FILE"]).read_text()
    if "PROVIDER_KEY_FILE" in os.environ
    else "",
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "E-mail", "groups": "Groups"},
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.provider.claims.GroupsValidator",
    "ID_TOKEN_EXPIRE_SECONDS": 300,
}
