"""Key scopes (docs/api.md#scopes): every API method a key may call declares exactly one scope, and a key is
refused 403 insufficient_scope outside its scopes, whatever the method (a table: every scope x every method)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from rest_framework.test import APIClient

from fleet.api.authentication import ApiKeyAuthentication
from fleet.api.permissions import KeyPermission
from fleet.api.scopes import ANY_SCOPE
from fleet.models import Permission, Scope
from fleet.services.iam import api_key_create

pytestmark = pytest.mark.django_db

#: Views that authenticate with API keys yet need none (AllowAny): /health and the public schema (docs/api.md).
KEYLESS = {"HealthView", "SpectacularAPIView", "SpectacularSwaggerView"}
SAMPLE = {"pk": "00000000-0000-4000-8000-000000000001", "node_id": "00000000-0000-4000-8000-000000000002"}
SAMPLE_VERSION = "9.9.9"


@dataclass(frozen=True)
class Method:
    path: str
    http: str
    view: type
    name: str  # the viewset action, or the HTTP method of a plain APIView
    scope: Scope | None

    def __str__(self) -> str:
        return f"{self.http.upper()} {self.path} ({self.view.__name__}.{self.name})"


def _patterns(resolver: URLResolver, prefix: str = "") -> list[tuple[str, URLPattern]]:
    found: list[tuple[str, URLPattern]] = []
    for entry in resolver.url_patterns:
        regex = prefix + entry.pattern.regex.pattern.lstrip("^").rstrip("$").replace("\\Z", "")
        if isinstance(entry, URLResolver):
            found.extend(_patterns(entry, regex))
        else:
            found.append((regex, entry))
    return found


def _concrete(regex: str) -> str:
    def sample(match: re.Match[str]) -> str:
        return SAMPLE.get(match.group(1), SAMPLE_VERSION)

    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", sample, regex)
    return "/" + path.replace("\\.", ".").replace("\\", "")


def _view(pattern: URLPattern, name: str, actions: dict[str, str] | None) -> Any:
    cls = pattern.callback.cls  # type: ignore[attr-defined]
    view = cls(**pattern.callback.initkwargs)  # type: ignore[attr-defined]
    if actions is not None:
        view.action_map, view.action = actions, name
    return view


@functools.cache
def key_methods() -> list[Method]:
    """Every (path, HTTP method) of the URL conf that an API key calls, with the scope its view declares."""
    methods: list[Method] = []
    for regex, pattern in _patterns(get_resolver()):
        cls = getattr(pattern.callback, "cls", None)
        if cls is None or ApiKeyAuthentication not in cls.authentication_classes:
            continue  # not DRF (the admin, downloads, metrics) or another credential (agent tokens)
        actions: dict[str, str] | None = getattr(pattern.callback, "actions", None)
        if actions is not None:
            pairs = [(http, name) for http, name in actions.items() if http not in {"head", "options"}]
        else:
            pairs = [
                (http, http) for http in cls.http_method_names if http not in {"head", "options"} and hasattr(cls, http)
            ]
        for http, name in pairs:
            view = _view(pattern, name, actions)
            if not any(isinstance(permission, KeyPermission) for permission in view.get_permissions()):
                assert cls.__name__ in KEYLESS, f"{cls.__name__}.{name} authenticates API keys without a KeyPermission"
                continue
            scope = dict(getattr(cls, "key_scopes", {})).get(name)
            methods.append(Method(_concrete(regex), http, cls, name, scope))
    return methods


def test_the_walk_finds_the_api():
    METHODS = key_methods()
    names = {(m.view.__name__, m.name) for m in METHODS}
    assert {("RolloutViewSet", "pause"), ("ApiKeyViewSet", "create"), ("TenantView", "get")} <= names
    assert len(METHODS) > 40
    for method in METHODS:
        assert resolve(method.path).func.cls is method.view, method  # type: ignore[attr-defined]


def test_every_api_method_declares_exactly_one_scope_and_every_get_is_read():
    METHODS = key_methods()
    undeclared = [str(m) for m in METHODS if not isinstance(m.scope, Scope) and m.scope != ANY_SCOPE]
    assert undeclared == []
    # Any key may make and revoke its own user's keys; nothing else is open to every scope.
    anyone = {(m.view.__name__, m.name) for m in METHODS if m.scope == ANY_SCOPE}
    assert anyone == {("ApiKeyViewSet", "create"), ("ApiKeyViewSet", "destroy")}
    not_read = [str(m) for m in METHODS if m.http == "get" and m.scope != Scope.READ]
    assert not_read == []
    # The contract's families (docs/api.md#scopes).
    by_name = {(m.view.__name__, m.name): m.scope for m in METHODS}
    for action in ("create", "pause", "resume", "abort", "promote", "start"):
        assert by_name[("RolloutViewSet", action)] == Scope.ROLLOUTS
    assert by_name[("RolloutViewSet", "approve")] == by_name[("RolloutViewSet", "deny")] == Scope.APPROVE
    for view in ("NodeViewSet", "PoolViewSet"):
        assert by_name[(view, "create")] == by_name[(view, "partial_update")] == Scope.NODES
    assert by_name[("NodeViewSet", "labels")] == Scope.NODES
    for action in ("create", "block", "unblock"):
        assert by_name[("ReleaseViewSet", action)] == Scope.RELEASES
    assert by_name[("ReleaseRootViewSet", "create")] == Scope.RELEASES


def _client(tenant, scope: str) -> APIClient:
    _, plain = api_key_create(
        tenant=tenant,
        username=f"only-{scope}",
        grants=[Permission.FLEET_ADMIN, Permission.ROLLOUT_APPROVE],
        scopes=[scope],
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def _call(client: APIClient, method: Method) -> Any:
    call = getattr(client, method.http)
    if method.http in {"post", "patch", "put"}:
        return call(method.path, {}, format="json")
    return call(method.path)


@pytest.mark.parametrize("scope", Scope.values)
def test_every_scope_against_every_api_method(tenant, scope):
    client = _client(tenant, scope)
    wrong: list[str] = []
    for method in key_methods():
        response = _call(client, method)
        body = response.json() if response.content else {}
        refused = response.status_code == 403 and body.get("code") == "insufficient_scope"
        if method.scope in (scope, ANY_SCOPE):
            if refused or response.status_code == 500:  # a 503 (no release keys set up here) is an answer
                wrong.append(f"{method}: allowed scope answered {response.status_code} {body}")
        elif not refused or body != {"code": "insufficient_scope", "detail": body["detail"], "required": method.scope}:
            wrong.append(f"{method}: {scope!r} answered {response.status_code} {body}")
    assert wrong == []


@override_settings(API_KEY_LAST_USED=True)
def test_a_scope_check_adds_no_query(tenant):
    """The key's scopes and expiry ride on the key lookup: a request refused for its scope makes that one query."""
    client = _client(tenant, Scope.READ)
    client.get("/api/compute/tenant/")  # the first use records lastUsedAt (a write at most once a minute)
    with CaptureQueriesContext(connection) as allowed:
        assert client.get("/api/compute/tenant/").status_code == 200
    with CaptureQueriesContext(connection) as refused:
        response = client.post("/api/compute/pools/", {"name": "a"}, format="json")
    assert response.status_code == 403
    assert response.json()["required"] == Scope.NODES
    assert "the 'nodes' scope" in response.json()["detail"]  # the scope's name, not its Python repr
    assert len(allowed) == 1, [q["sql"] for q in allowed.captured_queries]
    assert len(refused) == 1, [q["sql"] for q in refused.captured_queries]
    assert "fleet_apikey" in allowed.captured_queries[0]["sql"]
