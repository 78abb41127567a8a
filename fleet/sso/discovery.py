"""The provider's discovery document (``<issuer>/.well-known/openid-configuration``), read once per process."""

from __future__ import annotations

import threading
from typing import Any

import requests

from fleet.sso.config import issuer

TIMEOUT_SECONDS = 10
_REQUIRED = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
_cache: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


class DiscoveryError(Exception):
    """The discovery document could not be read or does not describe ``OIDC_ISSUER_URL``."""


def provider_metadata() -> dict[str, Any]:
    """The discovery document of ``OIDC_ISSUER_URL``, fetched at the first sign-in and kept (a failure is not)."""
    name = issuer()
    with _lock:
        if name not in _cache:
            _cache[name] = _fetch(name)
        return _cache[name]


def forget_metadata() -> None:
    """Read the document again at the next sign-in (tests; a provider that moved its endpoints)."""
    with _lock:
        _cache.clear()


def _fetch(name: str) -> dict[str, Any]:
    url = f"{name}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise DiscoveryError(f"The identity provider's discovery document {url} could not be read: {exc}") from exc
    if not isinstance(document, dict) or any(not document.get(key) for key in _REQUIRED):
        raise DiscoveryError(f"{url} lacks one of {', '.join(_REQUIRED)}.")
    # OpenID Connect Discovery 1.0 §4.3: the document's issuer is exactly the one asked about.
    if str(document["issuer"]).rstrip("/") != name:
        raise DiscoveryError(f"{url} names the issuer {document['issuer']!r}, not {name!r}.")
    return document
