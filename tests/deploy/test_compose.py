"""docker-compose.yml, the Dockerfile and docker/: checked without Docker (parsed, and held against the project).

Every environment variable the settings read must be set for the app containers; every command a container
runs must be one the project really has (test_compose_commands.py).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import runpy

import yaml

from tests.deploy.compose_file import (
    APP_SERVICES,
    COMPOSE,
    COMPOSE_TEXT,
    INTERPOLATION,
    ROOT,
    SERVICES,
    all_commands_of,
    argv,
    interpolate,
)
from tests.deploy.nginx_conf import nginx_directives, number

# Read by the settings for test runs only: never set in a deployment.
TEST_ONLY_ENV = {"TEST_DATABASE_NAME"}


def settings_env_vars() -> set[str]:
    """Environment variables read by project/settings.py and core/metrics.py (string literals)."""
    readers = {"env_str", "env_bool", "env_int_or_raw", "env_list", "getenv", "get"}
    names = set()
    for path in ("project/settings.py", "core/metrics.py"):
        tree = ast.parse((ROOT / path).read_text())
        constants = {
            target.id: node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name not in readers:
                continue
            if name == "get" and not (isinstance(func.value, ast.Attribute) and func.value.attr == "environ"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
            elif isinstance(first, ast.Name) and first.id in constants:
                names.add(constants[first.id])
    return names


# --- services and their order -----------------------------------------------------------------


def test_the_services():
    assert set(SERVICES) == {"db", "redis", "migrate", "web", "nginx", "worker", "beat"}
    assert SERVICES["db"]["image"] == "postgres:15"
    assert "pg_isready" in " ".join(argv(SERVICES["db"]["healthcheck"]["test"]))
    assert SERVICES["redis"]["image"] == "redis:7"
    assert argv(SERVICES["redis"]["healthcheck"]["test"])[1:] == ["redis-cli", "ping"]


def test_dependencies_wait_for_health_and_for_the_migrations():
    assert SERVICES["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert SERVICES["migrate"]["restart"] == "no"
    for name in ("web", "worker", "beat"):
        assert SERVICES[name]["depends_on"] == {
            "db": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
            "migrate": {"condition": "service_completed_successfully"},
        }, name


def test_exactly_one_beat_on_the_database_scheduler():
    beats = [name for name, service in SERVICES.items() if "beat" in argv(service.get("command", ""))]
    assert beats == ["beat"]
    args = argv(SERVICES["beat"]["command"])
    assert args[args.index("--scheduler") + 1] == "django_celery_beat.schedulers:DatabaseScheduler"
    assert SERVICES["beat"].get("deploy", {}).get("replicas", 1) == 1


def gunicorn_conf(monkeypatch, **environment: str) -> dict:
    """gunicorn.conf.py's settings, as gunicorn reads them in an environment with ``environment``."""
    for name in ("WEB_WORKERS", "LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "gunicorn.conf.py"))


def settings_default(name: str) -> object:
    """The default project/settings.py gives ``name`` when the environment does not set it."""
    tree = ast.parse((ROOT / "project/settings.py").read_text())
    return next(
        call.args[1].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and len(call.args) == 2 and isinstance(call.args[0], ast.Constant)
        if call.args[0].value == name and isinstance(call.args[1], ast.Constant)
    )


def test_web_runs_gunicorn_with_uvicorn_workers_threads_and_a_healthcheck(monkeypatch):
    """One definition of how gunicorn runs the tier: gunicorn.conf.py; compose and the image name only the
    application and the bind (make web, the demo and the tests: demo.processes.gunicorn_command)."""
    from demo.processes import gunicorn_command

    args = argv(SERVICES["web"]["command"])
    assert args == ["gunicorn", "project.asgi:application", "--bind", "0.0.0.0:8000"]
    assert all_commands_of("Dockerfile CMD") == args
    assert gunicorn_command(bind="0.0.0.0:8000")[3:] == args[1:]  # python -m gunicorn ...
    environment = SERVICES["web"]["environment"]
    conf = gunicorn_conf(monkeypatch, WEB_WORKERS=interpolate(environment["WEB_WORKERS"]))
    assert conf["worker_class"] == "uvicorn_worker.UvicornWorker"  # held agent sessions need async workers
    assert conf["workers"] == 3
    assert gunicorn_conf(monkeypatch)["workers"] == 3  # the same default without compose
    assert gunicorn_conf(monkeypatch, WEB_WORKERS="5")["workers"] == 5
    # Idle upstream connections: nginx closes them before gunicorn does.
    assert conf["keepalive"] > number(nginx_directives("upstream app"), "keepalive_timeout")
    assert conf["timeout"] >= 30
    # Threads per process for Django's views: one default everywhere (compose, settings, the system check).
    from fleet.checks import _POSITIVE

    check_default = next(default for name, default, *_ in _POSITIVE if name == "WEB_THREADS")
    assert int(interpolate(environment["WEB_THREADS"])) == settings_default("WEB_THREADS") == check_default == 4
    assert "ports" not in SERVICES["web"], "web is reached through nginx only"
    assert argv(SERVICES["web"]["healthcheck"]["test"])[1:] == ["python", "docker/healthcheck.py"]


def test_nginx_lets_a_held_agent_session_live():
    """The session location (the API's own path) waits longer than the longest wait (60 s) before a 504;
    upstream connections are kept alive; room for 10,000 held connections (two descriptors each)."""
    from django.urls import reverse

    from fleet.watch.front import SESSION_PATH

    assert reverse("fleet-agent-session") == SESSION_PATH
    session = nginx_directives(f"location = {SESSION_PATH}")
    assert session["proxy_pass"] == [["http://agents"]]
    # Each agent to the same web process every time (core/worker_sockets.py), by its token.
    agents = nginx_directives("upstream agents")
    assert agents["hash"] == [["$http_authorization", "consistent"]]
    assert int(agents["keepalive"][0][0]) >= 16
    assert number(session, "proxy_read_timeout") >= 60 + 15
    assert number(nginx_directives("location /"), "proxy_read_timeout") == 60
    # Set in server for every location; a location setting any proxy_set_header would drop them all.
    server = nginx_directives("server")
    assert server["proxy_http_version"] == [["1.1"]]
    assert ["Connection", '""'] in server["proxy_set_header"]
    for location in ("location /", f"location = {SESSION_PATH}"):  # every location that proxies to the app
        assert "proxy_pass" in nginx_directives(location)
        assert "proxy_set_header" not in nginx_directives(location), location
    # The request line and header lines: bounded here, as nothing behind nginx bounds them.
    assert server["large_client_header_buffers"] == [["4", "8k"]]
    assert int(nginx_directives("upstream app")["keepalive"][0][0]) >= 16
    assert number(nginx_directives("events"), "worker_connections") >= 16384
    assert number(nginx_directives(""), "worker_rlimit_nofile") >= 16384
    for name in ("web", "nginx"):
        assert SERVICES[name]["ulimits"]["nofile"] >= 20000, name


def test_nginx_runs_the_repository_config_in_front_of_web():
    """The published port is nginx's, with docker/nginx.conf filled in by envsubst exactly as demo/web.py fills
    it for `make web`, and the media volume read-only for the downloads it serves (X-Accel-Redirect)."""
    from demo.web import PLACEHOLDER, render_nginx_conf

    nginx = SERVICES["nginx"]
    assert any(port.endswith(":8000") for port in nginx["ports"])
    mounts = {target: source for source, target, *_ in (volume.split(":") for volume in nginx["volumes"])}
    command = argv(nginx["command"])
    assert command[:2] == ["sh", "-c"]
    script = command[2]
    template = re.search(r"< (\S+)", script)[1]
    assert mounts[template] == "./docker/nginx.conf"
    # Compose's $${NAME} reaches the shell as ${NAME}: envsubst's list of the names it may replace.
    listed = set(re.findall(r"\$\$\{([A-Z0-9_]+)\}", re.search(r"envsubst '([^']*)'", nginx["command"])[1]))
    assert listed == set(PLACEHOLDER.findall((ROOT / "docker/nginx.conf").read_text()))
    assert listed <= set(nginx["environment"])
    media = nginx["environment"]["ROLLOUT_MEDIA_ROOT"]
    assert media == SERVICES["web"]["environment"]["ROLLOUT_MEDIA_ROOT"]
    assert f"media:{media}:ro" in nginx["volumes"]
    assert nginx["environment"]["APP_UPSTREAM"] == "web:8000"
    # One server per web process, at web's ports per process.
    from core.worker_sockets import slot_addresses

    web = SERVICES["web"]["environment"]
    per_worker = slot_addresses(interpolate(web["WEB_WORKER_BIND"]), int(interpolate(web["WEB_WORKERS"])))
    ports = [address.rpartition(":")[2] for address in per_worker]
    # max_fails=0: a worker's socket outlives the worker, so only gunicorn down altogether refuses a connection, and
    # a server nginx marked failed would then refuse agents for 10 s after gunicorn is back.
    assert interpolate(nginx["environment"]["AGENT_SERVERS"]) == " ".join(
        f"server web:{port} max_fails=0;" for port in ports
    )
    assert SERVICES["web"]["expose"] == ["8000", f"{ports[0]}-{ports[-1]}"]
    assert nginx["depends_on"] == {"web": {"condition": "service_healthy"}}
    assert interpolate(SERVICES["web"]["environment"]["ROLLOUT_DOWNLOADS_OFFLOAD"]) == "accel"
    render_nginx_conf({name: "x" for name in listed})  # every name the file needs is listed


def test_the_app_services_share_one_anchor_for_image_environment_and_volumes():
    root = yaml.compose(COMPOSE_TEXT)
    services = next(value for key, value in root.value if key.value == "services")
    merged = {}
    for key, service in services.value:
        if key.value in APP_SERVICES:
            merge = [value for k, value in service.value if k.value == "<<"]
            assert len(merge) == 1, f"{key.value} does not merge the x-app anchor"
            merged[key.value] = merge[0]
    assert set(merged) == set(APP_SERVICES)
    anchor = next(iter(merged.values()))
    assert all(node is anchor for node in merged.values()), "one anchor for every app service"
    assert {key.value for key, _ in anchor.value} >= {"image", "build", "environment", "volumes"}
    for name in APP_SERVICES:
        assert SERVICES[name]["environment"] == SERVICES["web"]["environment"]
        assert SERVICES[name]["image"] == SERVICES["web"]["image"]


def test_media_and_metrics_directories_are_volumes():
    environment = SERVICES["web"]["environment"]
    mounts = dict(volume.split(":")[::-1] for volume in SERVICES["web"]["volumes"])
    assert mounts[environment["ROLLOUT_MEDIA_ROOT"]] in COMPOSE["volumes"]
    assert mounts[environment["PROMETHEUS_MULTIPROC_DIR"]] in COMPOSE["volumes"]
    assert SERVICES["worker"]["volumes"] == SERVICES["web"]["volumes"]  # the worker's tick samples reach web
    # Metrics files are named after pids: every process writing them shares web's pid namespace.
    assert SERVICES["worker"]["pid"] == SERVICES["beat"]["pid"] == "service:web"
    assert argv(SERVICES["migrate"]["command"])[:3] == ["env", "-u", "PROMETHEUS_MULTIPROC_DIR"]
    assert "/var/lib/postgresql/data" in SERVICES["db"]["volumes"][0]


# --- the environment -------------------------------------------------------------------------------


def test_every_variable_the_settings_read_is_set_for_the_app_containers():
    read = settings_env_vars()
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "ROLLOUT_RELEASE_PINS", "METRICS_TOKEN"} <= read  # the scan works
    missing = read - TEST_ONLY_ENV - set(SERVICES["web"]["environment"])
    assert missing == set()


def test_the_variables_the_brief_names_are_there():
    environment = SERVICES["web"]["environment"]
    for name in (
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "DJANGO_SECRET_KEY",
        "DJANGO_ALLOWED_HOSTS",
        "ROLLOUT_RELEASE_PINS",
        "ROLLOUT_RELEASE_THRESHOLD",
        "ROLLOUT_DOWNLOADS_URL",
        "ROLLOUT_EVERY",
        "FLEET_MIN_PROTOCOL_VERSION",
    ):
        assert name in environment, name
    assert interpolate(environment["DATABASE_URL"]).startswith("postgres://")
    assert interpolate(environment["DATABASE_URL"]).split("@")[1].startswith("db:5432/")
    assert interpolate(environment["CELERY_BROKER_URL"]).startswith("redis://redis:6379/")
    assert environment["DJANGO_DEBUG"] == "false"
    assert ":?" in environment["DJANGO_SECRET_KEY"], "compose refuses to start without a secret key"


def test_metrics_are_closed_unless_configured():
    """/metrics lists tenants and pools: compose passes the token from .env and does not open it by default."""
    environment = SERVICES["web"]["environment"]
    assert "METRICS_TOKEN" in environment["METRICS_TOKEN"]  # from .env
    assert interpolate(environment["METRICS_TOKEN"]) == ""  # no token baked into compose
    assert interpolate(environment["METRICS_PUBLIC"]) in {"", "0", "false"}
    lines = (ROOT / "docker/env.example").read_text().splitlines()
    example = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    assert example["METRICS_PUBLIC"] in {"", "0"}


def test_the_example_env_file_names_every_variable_compose_interpolates():
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / "docker/env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    used = {match["name"] for part in COMPOSE_TEXT.split("$$") for match in INTERPOLATION.finditer(part)}
    assert used - example == set()


def test_the_defaults_pass_the_system_checks(monkeypatch):
    """The compose defaults are a valid configuration (warnings for pins aside): no rollout.E error."""
    from django.conf import settings
    from django.core import checks

    environment = {name: interpolate(value) for name, value in SERVICES["web"]["environment"].items()}
    rollout = {
        "release": {"pins": [], "threshold": int(environment["ROLLOUT_RELEASE_THRESHOLD"])},
        "downloadsUrl": environment["ROLLOUT_DOWNLOADS_URL"],
        "every": int(environment["ROLLOUT_EVERY"]),
    }
    monkeypatch.setattr(settings, "ROLLOUT", rollout)
    messages = [m for m in checks.run_checks() if m.id.startswith("rollout.")]
    assert [m.id for m in messages if m.level >= checks.ERROR] == []
    assert [m.id for m in messages] == ["rollout.W001"]  # no pins until the operator sets them


# --- the image ------------------------------------------------------------------------------------


def test_the_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    assert "COPY requirements.lock ." in text
    assert "pip install --require-hashes -r requirements.lock" in text
    assert "manage.py collectstatic --noinput" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users
    assert users[-1] not in {"root", "0"}
    assert "/data/media" in text
    assert "/data/prometheus" in text


def test_the_dockerignore_keeps_the_virtualenv_and_secrets_out():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv", ".git", ".env", "*.pem"} <= ignored


def test_the_healthcheck_host_is_an_allowed_one(monkeypatch):
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "docker/healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for allowed, host in [("", "localhost"), ("*", "localhost"), (".example.com,x", "example.com"), ("a.b", "a.b")]:
        monkeypatch.setenv("DJANGO_ALLOWED_HOSTS", allowed)
        assert module.host() == host
