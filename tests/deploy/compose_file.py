"""docker-compose.yml and the Dockerfile as the deploy tests read them: the services, Compose's interpolation, and
every command a container runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "web", "worker", "beat")
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?::?[-?])(?P<default>[^}]*))?\}")


def interpolate(text: str) -> str:
    """Compose's ${NAME:-default} with its default (${NAME:?message} and ${NAME} as NAME), $$ as $."""
    parts = text.split("$$")  # an escaped $ is never the start of a name
    return "$".join(
        INTERPOLATION.sub(lambda m: m["default"] if m["default"] is not None else m["name"], part) for part in parts
    )


def argv(command: str | list[str]) -> list[str]:
    if isinstance(command, list):
        return [interpolate(part) for part in command]
    return shlex.split(interpolate(command))


def all_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for name in APP_SERVICES:
        commands.append((name, argv(SERVICES[name]["command"])))
        test = SERVICES[name].get("healthcheck", {}).get("test")
        if test:
            test = argv(test)
            commands.append((f"{name} healthcheck", shlex.split(test[1]) if test[0] == "CMD-SHELL" else test[1:]))
    dockerfile_cmd = re.search(r"^CMD (\[.*?\])\s*$", (ROOT / "Dockerfile").read_text().replace("\\\n", ""), re.M)
    commands.append(("Dockerfile CMD", yaml.safe_load(dockerfile_cmd[1])))
    return commands


def all_commands_of(where: str) -> list[str]:
    return next(args for name, args in all_commands() if name == where)
