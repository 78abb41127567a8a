"""System checks of the rollout module's configuration (rollout/checks.py; docs/signing.md#server-configuration)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from rollout import checks


def make_pin(seed: str) -> str:
    return "sha256/" + base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode()


BASE_DIR = Path(__file__).resolve().parent.parent
PIN_A, PIN_B, PIN_C = make_pin("a"), make_pin("b"), make_pin("c")


def rollout(
    *,
    pins: Any = (PIN_A, PIN_B),
    threshold: Any = 2,
    url: Any = "https://downloads.example.com",
    every: Any = 30,
) -> dict[str, Any]:
    return {
        "release": {"pins": list(pins) if isinstance(pins, tuple) else pins, "threshold": threshold},
        "downloadsUrl": url,
        "every": every,
    }


def messages(**settings: Any) -> list[Any]:
    with override_settings(**settings):
        return [
            *checks.check_release_keys(),
            *checks.check_downloads_url(),
            *checks.check_every(),
            *checks.check_min_protocol_version(),
        ]


def ids(**settings: Any) -> list[str]:
    return [message.id for message in messages(**settings)]


def test_good_configuration_passes() -> None:
    assert messages(ROLLOUT=rollout(), FLEET_MIN_PROTOCOL_VERSION=2) == []


@pytest.mark.parametrize(
    "url",
    [
        "https://downloads.example.com",
        "https://downloads.example.com/releases/",
        "https://downloads.example.com:8443/x",
        "http://localhost:8000/downloads",
        "http://127.0.0.1/downloads",
        "http://127.10.20.30:9000",
        "http://[::1]:8000/d",
        "HTTPS://Example.COM",
    ],
)
def test_good_downloads_urls(url: str) -> None:
    assert ids(ROLLOUT=rollout(url=url)) == []


@pytest.mark.parametrize(
    "url",
    [
        "http://downloads.example.com",
        "http://128.0.0.1",
        "http://10.0.0.1",
        "http://[::2]",
        "http://localhost.example.com",
        "ftp://downloads.example.com",
        "downloads.example.com",
        "https://",
        "https:///path",
        "http://",
        "https://host:notaport",
        "https://user:secret@downloads.example.com",
        "https://downloads.example.com/?x=1",
        "https://downloads.example.com/#frag",
        "https://downloads.example.com/a b",
        12,
    ],
)
def test_bad_downloads_urls(url: Any) -> None:
    assert ids(ROLLOUT=rollout(url=url)) == ["rollout.E006"]


@pytest.mark.parametrize(
    ("pin", "detail"),
    [
        ("sha256/short", "sha256/short"),
        ("md5/" + base64.b64encode(b"\0" * 16).decode(), "md5/"),
        ("sha256/" + base64.b64encode(b"\0" * 31).decode(), "31 bytes"),
        ("sha256/" + hashlib.sha256(b"x").hexdigest(), "sha256/"),
        (PIN_A.rstrip("="), "sha256/"),
        (7, "7"),
    ],
)
def test_malformed_pin_is_named(pin: Any, detail: str) -> None:
    found = messages(ROLLOUT=rollout(pins=[PIN_A, pin], threshold=1))
    assert [m.id for m in found] == ["rollout.E002"]
    assert detail in found[0].msg
    assert isinstance(found[0], Error)
    assert found[0].hint


@pytest.mark.parametrize("threshold", ["two", "1.5", 1.0, True, None, [1]])
def test_threshold_not_an_integer(threshold: Any) -> None:
    assert ids(ROLLOUT=rollout(threshold=threshold)) == ["rollout.E003"]


@pytest.mark.parametrize("threshold", [0, -1])
def test_threshold_below_one(threshold: int) -> None:
    assert ids(ROLLOUT=rollout(threshold=threshold)) == ["rollout.E004"]


def test_threshold_above_the_number_of_pins() -> None:
    assert ids(ROLLOUT=rollout(pins=[PIN_A, PIN_B], threshold=3)) == ["rollout.E005"]
    assert ids(ROLLOUT=rollout(pins=[PIN_A, PIN_B, PIN_C], threshold=3)) == []


def test_duplicate_pins_count_once() -> None:
    found = ids(ROLLOUT=rollout(pins=[PIN_A, PIN_A], threshold=2))
    assert found == ["rollout.W003", "rollout.E005"]
    assert ids(ROLLOUT=rollout(pins=[PIN_A, PIN_A], threshold=1)) == ["rollout.W003"]


def test_without_pins_only_a_threshold_above_one_is_an_error() -> None:
    """Missing pins are a warning (the server runs; registering answers 503); a threshold of 2 then is more
    than the 0 pins as well."""
    assert ids(ROLLOUT=rollout(pins=[], threshold=1)) == ["rollout.W001"]
    assert ids(ROLLOUT=rollout(pins=[], threshold=2)) == ["rollout.E005", "rollout.W001"]


@pytest.mark.parametrize("pins", ["sha256/abc", {"a": 1}, 5])
def test_pins_of_the_wrong_type(pins: Any) -> None:
    assert "rollout.E001" in ids(ROLLOUT=rollout(pins=pins, threshold=1))


@pytest.mark.parametrize("every", [0, -5, "soon", "30s", 1.5, True])
def test_every(every: Any) -> None:
    assert ids(ROLLOUT=rollout(every=every)) == ["rollout.E007"]


@pytest.mark.parametrize("value", [0, -1, "two", 2.0, False])
def test_min_protocol_version(value: Any) -> None:
    assert ids(ROLLOUT=rollout(), FLEET_MIN_PROTOCOL_VERSION=value) == ["rollout.E008"]


def test_missing_pins_and_downloads_url_are_warnings() -> None:
    found = messages(ROLLOUT=rollout(pins=[], threshold=1, url=None))
    assert [m.id for m in found] == ["rollout.W001", "rollout.W002"]
    assert all(isinstance(m, Warning) and not isinstance(m, Error) for m in found)
    assert "no_release_keys" in found[0].msg
    assert "no_downloads_url" in found[1].msg
    assert ids(ROLLOUT=rollout(url="")) == ["rollout.W002"]


def test_empty_or_missing_rollout_setting_warns_only() -> None:
    assert ids(ROLLOUT={}) == ["rollout.W001", "rollout.W002"]
    assert ids(ROLLOUT={"release": None, "downloadsUrl": None}) == ["rollout.W001", "rollout.W002"]


def test_rollout_setting_of_the_wrong_type() -> None:
    assert ids(ROLLOUT=["not", "a", "dict"]) == ["rollout.E001"]
    assert ids(ROLLOUT={"release": "pins"}) == ["rollout.E001", "rollout.W002"]


CHECK_ID = re.compile(r"^(?:core|fleet|rollout)\.[EW]\d{3}$")
ROOT = Path(__file__).resolve().parents[1]


def check_ids_defined() -> dict[str, set[str]]:
    """{check id: the modules whose code writes it}, read from the source of every module of the apps."""
    import ast

    found: dict[str, set[str]] = {}
    for package in ("core", "fleet", "rollout", "project"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and CHECK_ID.match(node.value):
                    found.setdefault(node.value, set()).add(path.relative_to(ROOT).as_posix())
    return found


def documented_ids(path: str) -> list[str]:
    """The ids of the id table in the docstring of the module at ``path`` (its rows ``| fleet.E001 | ... |``)."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / path).read_text())) or ""
    return re.findall(r"^\| ((?:core|fleet|rollout)\.[EW]\d{3}) \|", doc, flags=re.MULTILINE)


def test_every_check_id_is_distinct_and_documented() -> None:
    defined = check_ids_defined()
    assert {"rollout.E001", "rollout.W004", "rollout.E020", "fleet.E001", "fleet.W001"} <= set(defined)
    # Distinct: one module writes each id, and each id names one problem (one row of its module's table).
    assert {check_id: modules for check_id, modules in defined.items() if len(modules) > 1} == {}
    tables = {module: documented_ids(module) for modules in defined.values() for module in modules}
    for module, rows in tables.items():
        assert len(rows) == len(set(rows)), module
    # Documented: each id the code writes has its row, and each row names an id the code writes.
    for check_id, (module,) in defined.items():
        assert check_id in tables[module], (check_id, module)
    assert {row for rows in tables.values() for row in rows} == set(defined)


def test_the_check_id_reader_sees_a_second_use() -> None:
    """The test above can fail: an id written in a second module is seen as such."""
    defined = check_ids_defined()
    (module,) = defined["rollout.E001"]
    assert module == "rollout/checks.py"
    assert "rollout.E001" in documented_ids(module)
    assert "rollout.E999" not in documented_ids(module)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"ROLLOUT": rollout(pins=["sha256/nope"], threshold=1)}, "rollout.E002"),
        ({"ROLLOUT": rollout(threshold="two")}, "rollout.E003"),
        ({"ROLLOUT": rollout(threshold=0)}, "rollout.E004"),
        ({"ROLLOUT": rollout(threshold=3)}, "rollout.E005"),
        ({"ROLLOUT": rollout(url="http://downloads.example.com")}, "rollout.E006"),
        ({"ROLLOUT": rollout(every=0)}, "rollout.E007"),
        ({"FLEET_MIN_PROTOCOL_VERSION": 0}, "rollout.E008"),
    ],
)
def test_manage_py_check_fails(bad: dict[str, Any], expected: str) -> None:
    settings = {"ROLLOUT": rollout(), "FLEET_MIN_PROTOCOL_VERSION": 2, **bad}
    with override_settings(**settings), pytest.raises(SystemCheckError, match=re.escape(expected)):
        call_command("check", "--tag", checks.TAG)


def test_manage_py_check_passes_with_good_options_and_with_warnings(capsys) -> None:
    with override_settings(ROLLOUT=rollout(), FLEET_MIN_PROTOCOL_VERSION=2):
        call_command("check", "--tag", checks.TAG)
    with override_settings(ROLLOUT=rollout(pins=[], threshold=1, url=None)):
        call_command("check", "--tag", checks.TAG)
    output = capsys.readouterr()
    assert "rollout.W001" in output.err + output.out
    assert "rollout.W002" in output.err + output.out


def test_full_check_command_reports_a_rollout_error() -> None:
    """Without --tag, as an operator runs ``manage.py check``: the rollout checks are part of it."""
    with (
        override_settings(ROLLOUT=rollout(threshold=0)),
        pytest.raises(SystemCheckError, match=re.escape("rollout.E004")),
    ):
        call_command("check")


def _manage(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///db.sqlite3",
        "sqlite:////nowhere/at/all.db",
        "mysql://u@127.0.0.1/x",
        "foo://u:secret@127.0.0.1/x",  # a scheme that names no database: a check error too, never a traceback
        "not-a-url",
    ],
)
def test_a_database_other_than_postgresql_is_a_check_error_and_nothing_is_opened(url: str, tmp_path) -> None:
    done = _manage("migrate", database_url=url.replace("db.sqlite3", str(tmp_path / "db.sqlite3")))
    assert done.returncode == 1
    assert "(fleet.E007)" in done.stderr, done.stderr
    assert "runs on PostgreSQL only" in done.stderr
    assert "Traceback" not in done.stderr
    assert "secret" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made


def test_a_missing_database_is_one_line_that_says_what_to_run() -> None:
    done = _manage("migrate", database_url="postgres://postgres@127.0.0.1:5432/rollout_no_such_database")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        'manage.py: PostgreSQL at 127.0.0.1:5432 has no database "rollout_no_such_database": create it with '
        "`createdb -h 127.0.0.1 -p 5432 -U postgres rollout_no_such_database`, then run `manage.py migrate` "
        "(or set DATABASE_URL to another database)."
    )
    assert "Traceback" not in done.stderr


def test_no_server_is_one_line_too(tmp_path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        done = _manage("migrate", database_url=f"postgres://postgres@127.0.0.1:{port}/rollout")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"manage.py: cannot connect to PostgreSQL at 127.0.0.1:{port} (DATABASE_URL): "), last
    assert "Traceback" not in done.stderr
