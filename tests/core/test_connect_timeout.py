"""A database host that accepts a connection and never answers (paused, black-holed) is given up on after
DATABASE_CONNECT_TIMEOUT seconds (docs/operations.md), not waited on for ever: libpq's own default waits."""

from __future__ import annotations

import socket
import time

import psycopg
import pytest
from django.db import connections


def test_a_silent_database_host_is_given_up_on_within_the_connect_timeout():
    params = connections["default"].get_connection_params()
    assert params["connect_timeout"] == 3
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never speaks
    port = listener.getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(**{**params, "host": "127.0.0.1", "port": port})
    finally:
        listener.close()
    assert time.monotonic() - started < 10
