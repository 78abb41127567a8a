"""The systemd units docs/operations.md ships for hosts without compose: web (`make web`'s launcher), worker and
beat, each restarted whatever ends it, running exactly what compose runs."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = "/opt/rollout/.venv/bin/"


def units() -> dict[str, configparser.ConfigParser]:
    text = (ROOT / "docs" / "operations.md").read_text()
    found = {}
    for block in re.findall(r"```ini\n(.*?)```", text, flags=re.S):
        name = re.match(r"# /etc/systemd/system/(\S+)\.service\n", block)
        assert name, block[:80]
        parser = configparser.ConfigParser(interpolation=None, strict=True)  # keys read lower-cased
        parser.read_string(block)
        found[name[1]] = parser
    return found


def compose_command(service: str) -> list[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"][service]["command"]
    defaults = {"${LOG_LEVEL:-INFO}": "INFO", "${WORKER_CONCURRENCY:-2}": "2"}
    for name, value in defaults.items():
        command = command.replace(name, value)
    return shlex.split(command)


def test_three_units_restarted_always_with_the_settings_file():
    found = units()
    assert set(found) == {"rollout-web", "rollout-worker", "rollout-beat"}
    for unit in found.values():
        service = unit["Service"]
        assert service["restart"] == "always"
        assert service["environmentfile"] == "/etc/rollout/env"
        assert service["workingdirectory"] == "/opt/rollout"
        assert unit["Install"]["wantedby"] == "multi-user.target"


def test_worker_and_beat_run_compose_s_commands_and_web_runs_make_web_s_launcher():
    found = units()
    for service in ("worker", "beat"):
        command = shlex.split(found[f"rollout-{service}"]["Service"]["execstart"])
        assert command[0] == VENV_BIN + command[0].removeprefix(VENV_BIN)
        assert [command[0].removeprefix(VENV_BIN), *command[1:]] == compose_command(service)
    web = shlex.split(found["rollout-web"]["Service"]["execstart"])
    assert web[:3] == [VENV_BIN + "python", "-m", "demo.web"]
    assert (ROOT / "demo" / "web.py").exists()
    assert found["rollout-web"]["Service"]["killmode"] == "mixed"  # SIGTERM to the launcher, which stops the rest
