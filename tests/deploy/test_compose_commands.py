"""Every command a container of docker-compose.yml (or the Dockerfile's CMD) runs is one the project really has:
its program installed from requirements.txt (or python), its subcommand and options accepted. Without Docker."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.utils.module_loading import import_string

from tests.deploy.compose_file import ROOT, all_commands


def requirement_names() -> set[str]:
    names = set()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.split(r"[\[=<>~!; ]", line, maxsplit=1)[0].lower())
    return names


def celery_subcommands() -> set[str]:
    from celery.bin.celery import celery

    return set(celery.commands)


def parse_celery_options(args: list[str]) -> None:
    """Parse ``worker ...``/``beat ...``/``inspect ...`` as celery's click CLI does: an unknown option fails."""
    import click
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    from project import celery_app

    parent = click.Context(celery, obj=CLIContext(app=celery_app, no_color=True, workdir=None, quiet=True))
    try:
        celery.commands[args[0]].make_context(args[0], list(args[1:]), parent=parent)
    except click.UsageError as exc:
        pytest.fail(f"celery {' '.join(args)}: {exc}")


def assert_real_command(args: list[str]) -> None:
    """The program is installed from requirements.txt (or is python) and its subcommand exists."""
    if args[0] == "env":  # env -u NAME program args...
        args = args[1:]
        while args[0] == "-u":
            args = args[2:]
    program = args[0]
    if program == "python":
        if args[1] == "manage.py":
            assert args[2] in get_commands(), f"manage.py has no {args[2]!r} command"
        else:
            assert (ROOT / args[1]).is_file(), args
        return
    assert program in requirement_names(), f"{program} is not in requirements.txt"
    if program == "gunicorn":
        target = next(arg for arg in args[1:] if ":" in arg and not arg.startswith("-"))
        module, attribute = target.split(":")
        assert callable(getattr(importlib.import_module(module), attribute)), target
        # gunicorn itself loads the app and refuses an unknown option or a bad value.
        gunicorn = Path(sys.executable).with_name("gunicorn")
        checked = subprocess.run(
            [str(gunicorn), "--check-config", *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stderr[-2000:]
    elif program == "celery":
        app_path = args[args.index("-A") + 1]
        module = importlib.import_module(app_path)
        from celery import Celery

        assert any(isinstance(getattr(module, name, None), Celery) for name in ("app", "celery", "celery_app"))
        rest = args[args.index("-A") + 2 :]
        assert rest[0] in celery_subcommands(), rest[0]
        parse_celery_options(rest)
        if "--scheduler" in args:
            import_string(args[args.index("--scheduler") + 1].replace(":", "."))
    else:  # pragma: no cover - a new program needs a check here
        pytest.fail(f"no check for {program}")


@pytest.mark.parametrize(("where", "args"), all_commands(), ids=[where for where, _ in all_commands()])
def test_every_command_is_one_the_project_has(where, args):
    assert_real_command(args)


def test_gunicorn_and_celery_are_runtime_requirements():
    assert {"gunicorn", "celery", "django-celery-beat", "psycopg", "redis"} <= requirement_names()
