"""The front takes a session request only when Django would take its Host (fleet/watch/asgi.py ``host_allowed``):
its verdict is compared with Django's own ``get_host`` on the environ a2wsgi builds from the same ASGI scope."""

from __future__ import annotations

import io

import pytest
from a2wsgi.wsgi import build_environ
from django.core.exceptions import DisallowedHost
from django.core.handlers.wsgi import WSGIRequest

from fleet.watch import asgi
from fleet.watch.asgi import host_allowed

LONG = b"a" * 400 + b".example"


def scope(headers: list[tuple[bytes, bytes]], server: tuple[str, int | None] | None = ("127.0.0.1", 8000)) -> dict:
    return {
        "type": "http", "http_version": "1.1", "method": "POST", "scheme": "http", "path": "/api/compute/agent/session",
        "query_string": b"", "root_path": "", "headers": headers, "client": ("127.0.0.1", 1234), "server": server,
    }  # fmt: skip


def django_takes(request_scope: dict) -> bool:
    request = WSGIRequest(build_environ(request_scope, io.BytesIO()))  # type: ignore[arg-type]
    try:
        request.get_host()
    except DisallowedHost:
        return False
    return True


CASES = [
    scope([(b"host", b"localhost")]),
    scope([(b"host", b"LOCALHOST:8000")]),
    scope([(b"host", b"127.0.0.1:8000")]),
    scope([(b"host", b"evil.example")]),
    scope([(b"host", b"localhost"), (b"host", b"evil.example")]),  # repeated: Django sees both, joined
    scope([(b"host", b"evil.example"), (b"host", b"localhost")]),
    scope([(b"host", b"localhost"), (b"x-forwarded-host", b"evil.example")]),
    scope([(b"host", b"evil.example"), (b"x-forwarded-host", b"localhost")]),
    scope([(b"host", b"localhost:notaport")]),
    scope([(b"host", LONG)]),
    scope([], server=("localhost", 8000)),  # no Host: the server's name
    scope([], server=("evil.example", 8000)),
    scope([], server=None),  # neither: a2wsgi's localhost:80
    scope([], server=("/run/web.sock", None)),
]


@pytest.mark.parametrize("forwarded", [False, True])
@pytest.mark.parametrize("request_scope", CASES)
def test_the_front_takes_a_host_exactly_when_django_does(request_scope, forwarded, settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    settings.USE_X_FORWARDED_HOST = forwarded
    assert host_allowed(request_scope) is django_takes(request_scope)


def test_a_changed_setting_is_obeyed_at_once(settings):
    request_scope = scope([(b"host", b"rollout.example")])
    settings.ALLOWED_HOSTS = ["localhost"]
    assert host_allowed(request_scope) is False
    settings.ALLOWED_HOSTS = ["localhost", "rollout.example"]
    assert host_allowed(request_scope) is True


def test_a_host_no_name_could_be_is_judged_but_not_kept(settings):
    settings.ALLOWED_HOSTS = ["localhost"]
    asgi._host_valid_cached.cache_clear()
    assert host_allowed(scope([(b"host", LONG)])) is False
    assert host_allowed(scope([(b"host", b"localhost")])) is True
    assert asgi._host_valid_cached.cache_info().currsize == 1  # only the short one
