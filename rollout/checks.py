"""System checks of settings.ROLLOUT and FLEET_MIN_PROTOCOL_VERSION.

A bad configuration fails ``manage.py check`` (and every management command
and the server's start) with a ``rollout.E…`` error instead of crashing at
first use. A missing option that only disables a feature is a ``rollout.W…``
warning. The settings are read from the environment by project/settings.py,
which keeps a malformed integer as its raw string so that it is reported here.

| id | what |
| --- | --- |
| rollout.E001 | ROLLOUT, ROLLOUT["release"] or the pins list has the wrong type |
| rollout.E002 | a pin is not ``sha256/<base64 of 32 bytes>`` |
| rollout.E003 | the threshold is not an integer |
| rollout.E004 | the threshold is below 1 |
| rollout.E005 | the threshold is above the number of distinct pins |
| rollout.E006 | the downloads URL is not https:// (or http:// to a loopback host) |
| rollout.E007 | ``every`` is not an integer >= 1 |
| rollout.E008 | FLEET_MIN_PROTOCOL_VERSION is not an integer >= 1 |
| rollout.E030 | ROLLOUT_PROMETHEUS_URL is not an http(s):// URL of a host (with no query or fragment) |
| rollout.E031 | an ROLLOUT_GATE_URL_ALLOW prefix is not http(s)://host... (a prefix that ends in the host |
|              | name, as ``https://status.example``, would admit ``https://status.example.evil.net``) |
| rollout.W001 | no pins: registering answers 503 no_release_keys |
| rollout.W002 | no downloads URL: creating a rollout answers 503 no_downloads_url |
| rollout.W003 | a pin is listed twice (it counts once) |
| rollout.W004 | the configured pins or threshold differ from the recorded root 1 (it changes nothing) |
| rollout.W005 | ROLLOUT_EVERY differs from the stored interval of the ``rollout/all`` periodic task, the one  |
|              | the beat runs and the controller's health is judged by (changed in the admin, or not migrated) |
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, transaction

from rollout.release.keys import parse_pin

TAG = "rollout"
PINS_HINT = (
    "Set ROLLOUT_RELEASE_PINS to comma-separated pins, each printed by "
    "`python -m rollout.release pin KEY.pem` (see docs/signing.md)."
)


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _release_options() -> tuple[dict[str, Any] | None, list[CheckMessage]]:
    raw = getattr(settings, "ROLLOUT", None)
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return None, [
            Error(
                f"settings.ROLLOUT must be a dict, not {type(raw).__name__}.",
                hint='ROLLOUT = {"release": {"pins": [...], "threshold": 1}, "downloadsUrl": "...", "every": 30}',
                id="rollout.E001",
            )
        ]
    return raw, []


@register(TAG)
def check_release_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Pins and threshold: ROLLOUT["release"] (ROLLOUT_RELEASE_PINS, ROLLOUT_RELEASE_THRESHOLD)."""
    options, messages = _release_options()
    if options is None:
        return messages
    release = options.get("release")
    if release is None:
        release = {}
    if not isinstance(release, dict):
        return [
            Error(
                f'settings.ROLLOUT["release"] must be a dict, not {type(release).__name__}.',
                hint='"release": {"pins": ["sha256/..."], "threshold": 1}',
                id="rollout.E001",
            )
        ]

    pins = release.get("pins")
    if pins is None:
        pins = []
    if isinstance(pins, str) or not isinstance(pins, list | tuple):
        messages.append(
            Error(
                f'settings.ROLLOUT["release"]["pins"] must be a list of pins, not {type(pins).__name__}.',
                hint=PINS_HINT,
                id="rollout.E001",
            )
        )
        pins = []

    valid: list[str] = []
    malformed = 0
    for pin in pins:
        try:
            parse_pin(pin)
        except ValueError as exc:
            malformed += 1
            messages.append(
                Error(
                    f"Malformed release pin in ROLLOUT_RELEASE_PINS: {exc}.",
                    hint="A pin is sha256/ followed by the standard base64 (with padding) of 32 bytes. " + PINS_HINT,
                    id="rollout.E002",
                )
            )
            continue
        if pin in valid:
            messages.append(
                Warning(
                    f"The release pin {pin} is listed more than once; it counts once toward the threshold.",
                    hint="Remove the duplicate from ROLLOUT_RELEASE_PINS.",
                    id="rollout.W003",
                )
            )
            continue
        valid.append(pin)

    threshold = release.get("threshold", 1)
    if type(threshold) is not int:
        messages.append(
            Error(
                f"The release threshold (ROLLOUT_RELEASE_THRESHOLD) must be an integer, not {_describe(threshold)}.",
                hint="Set ROLLOUT_RELEASE_THRESHOLD to how many distinct pinned keys must sign, for example 2.",
                id="rollout.E003",
            )
        )
    elif threshold < 1:
        messages.append(
            Error(
                f"The release threshold (ROLLOUT_RELEASE_THRESHOLD) must be at least 1; it is {threshold}.",
                hint="Set ROLLOUT_RELEASE_THRESHOLD to 1 or more: an unsigned release is never accepted.",
                id="rollout.E004",
            )
        )
    elif not malformed and threshold > len(valid) and (pins or threshold > 1):
        # Only when every pin is well formed: a malformed one is already reported (E002). No pins with the default
        # threshold of 1 is only the warning of missing pins (W001): the server runs, registering answers 503.
        messages.append(
            Error(
                f"The release threshold {threshold} (ROLLOUT_RELEASE_THRESHOLD) is more than the {len(valid)} distinct "
                "pinned key(s) in ROLLOUT_RELEASE_PINS: "
                "no release could ever be registered.",
                hint="Lower ROLLOUT_RELEASE_THRESHOLD or add pins to ROLLOUT_RELEASE_PINS.",
                id="rollout.E005",
            )
        )

    if not pins:
        messages.append(
            Warning(
                "No release keys are pinned: registering a release answers 503 no_release_keys.",
                hint=PINS_HINT,
                id="rollout.W001",
            )
        )
    return messages


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.version == 4:
        return address in ipaddress.ip_network("127.0.0.0/8")
    return address == ipaddress.ip_address("::1")


def url_problem(url: Any) -> str | None:
    if not isinstance(url, str):
        return f"must be a string, not {type(url).__name__}"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (raises ValueError on a malformed port)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("https", "http"):
        return "must start with https://"
    if not host:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return "must not have a query or fragment: binary paths are appended to it"
    if parts.scheme == "http" and not _loopback(host):
        return "uses plain http:// to a host that is not loopback; use https://"
    return None


@register(TAG)
def check_downloads_url(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """ROLLOUT["downloadsUrl"] (ROLLOUT_DOWNLOADS_URL)."""
    options, messages = _release_options()
    if options is None:
        return []  # reported by check_release_keys
    url = options.get("downloadsUrl")
    if url is None or url == "":
        return [
            Warning(
                "No downloads URL is configured: creating a rollout answers 503 no_downloads_url.",
                hint="Set ROLLOUT_DOWNLOADS_URL, for example https://downloads.example.com; a binary is "
                "{downloadsUrl}/bcd/{version}/linux-{arch}.",
                id="rollout.W002",
            )
        ]
    problem = url_problem(url)
    if problem:
        messages.append(
            Error(
                f"The downloads URL (ROLLOUT_DOWNLOADS_URL) {url!r} {problem}.",
                hint="ROLLOUT_DOWNLOADS_URL must be https://host[/path]; plain http:// is accepted only for "
                "localhost, 127.0.0.0/8 and [::1].",
                id="rollout.E006",
            )
        )
    return messages


def _positive_integer_problem(value: Any) -> str | None:
    if type(value) is not int:
        return f"must be an integer, not {_describe(value)}"
    if value < 1:
        return f"must be at least 1; it is {value}"
    return None


@register(TAG)
def check_every(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """ROLLOUT["every"] (ROLLOUT_EVERY): seconds between controller ticks."""
    options, _ = _release_options()
    if options is None:
        return []
    every = options.get("every", 30)
    problem = _positive_integer_problem(every)
    if problem:
        return [
            Error(
                f'The controller interval (ROLLOUT_EVERY, settings.ROLLOUT["every"]) {problem}.',
                hint="Set ROLLOUT_EVERY to the seconds between controller ticks, an integer >= 1 (default 30).",
                id="rollout.E007",
            )
        ]
    return []


@register(TAG)
def check_min_protocol_version(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """FLEET_MIN_PROTOCOL_VERSION: agents below it are restricted to upgrades."""
    value = getattr(settings, "FLEET_MIN_PROTOCOL_VERSION", 2)
    problem = _positive_integer_problem(value)
    if problem:
        return [
            Error(
                f"FLEET_MIN_PROTOCOL_VERSION {problem}.",
                hint="Set FLEET_MIN_PROTOCOL_VERSION to an integer >= 1 (default 2).",
                id="rollout.E008",
            )
        ]
    return []


@register(TAG)
def check_recorded_root(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Root 1 of the key chain is the configuration as it was the first time it was needed; later
    configuration changes nothing (docs/signing.md#rotating-the-release-keys). Say so when they differ.

    It reads the database (one query) when it can: a database that is down, not migrated yet or
    not to be touched here (another alias asked for, a test without database access, another engine
    than PostgreSQL) has nothing
    recorded to disagree with, and a check never crashes the command that runs it.
    """
    from rollout.models import ReleaseRoot

    if databases is not None and "default" not in databases:
        return []
    try:
        with transaction.atomic():
            rows = ReleaseRoot.objects.filter(version=1).values("pins", "threshold")
            recorded = rows.first()
            newest = ReleaseRoot.objects.order_by("-version").values_list("version", flat=True).first()
    except (DatabaseError, RuntimeError, ImproperlyConfigured):
        # RuntimeError: database access is blocked (pytest-django); ImproperlyConfigured: no database to read,
        # DATABASE_URL named another engine than PostgreSQL (fleet.E007 says so).
        return []
    if recorded is None:
        return []
    options, _ = _release_options()
    release = (options or {}).get("release") or {}
    pins = release.get("pins") if isinstance(release, dict) else None
    threshold = release.get("threshold", 1) if isinstance(release, dict) else None
    configured = set(pins) if isinstance(pins, list | tuple) else None
    if configured == set(recorded["pins"]) and threshold == recorded["threshold"]:
        return []
    return [
        Warning(
            f"ROLLOUT_RELEASE_PINS / ROLLOUT_RELEASE_THRESHOLD differ from root 1 of the key chain, recorded "
            f"when it was first needed ({recorded['threshold']} of {len(recorded['pins'])} pins). The "
            f"configuration changes nothing: releases register against root {newest}, the newest of the chain.",
            hint="Rotate keys by registering a new root (python -m rollout.release root sign, then POST "
            "/api/compute/release-roots/; docs/signing.md), or set the configuration back to root 1.",
            id="rollout.W004",
        )
    ]


@register(TAG)
def check_gates(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """ROLLOUT_PROMETHEUS_URL and ROLLOUT_GATE_URL_ALLOW (docs/operations.md#gates)."""
    from rollout.webhooks.safety import UnsafeURL, parse_url

    messages: list[CheckMessage] = []
    url = getattr(settings, "ROLLOUT_PROMETHEUS_URL", None)
    if url:
        problem = None
        try:
            parse_url(url, allow_http=True)
        except UnsafeURL as exc:
            problem = str(exc)
        if problem is None and ("?" in url or "#" in url):
            problem = "It must not have a query or a fragment."
        if problem is not None:
            messages.append(
                Error(
                    f"ROLLOUT_PROMETHEUS_URL {url!r} is not usable: {problem}",
                    hint="Set it to Prometheus' base URL, e.g. http://127.0.0.1:9090 (queries go to /api/v1/query).",
                    id="rollout.E030",
                )
            )
    for prefix in getattr(settings, "ROLLOUT_GATE_URL_ALLOW", None) or ():
        parts = urlsplit(prefix)
        if parts.scheme not in ("http", "https") or not parts.netloc or not (parts.path or prefix.endswith(("/", ":"))):
            messages.append(
                Error(
                    f"ROLLOUT_GATE_URL_ALLOW prefix {prefix!r} must be http(s)://host/ with at least the / after the "
                    "host (or host:port/): a prefix ending in the host name admits longer host names.",
                    hint="For example ROLLOUT_GATE_URL_ALLOW=https://status.example.com/,https://ci.example.com/health",
                    id="rollout.E031",
                )
            )
    return messages


@register(TAG)
def check_tick_schedule(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """ROLLOUT_EVERY against the stored ``rollout/all`` task (docs/operations.md#the-controllers-interval): the beat
    runs the stored one. Reads the database as check_recorded_root does, and says nothing when it cannot."""
    from rollout.schedules import tick_every_stored

    if databases is not None and "default" not in databases:
        return []
    options, _ = _release_options()
    every = (options or {}).get("every", 30)
    if _positive_integer_problem(every):
        return []  # rollout.E007
    try:
        with transaction.atomic():
            stored = tick_every_stored()
    except (DatabaseError, RuntimeError, ImproperlyConfigured):
        return []
    if stored is None or stored == every:
        return []
    return [
        Warning(
            f"ROLLOUT_EVERY is {every} s but the stored rollout/all periodic task runs every {stored} s: the beat "
            f"ticks every {stored} s, and the controller's health is judged by it.",
            hint="Keep the interval changed in the admin and set ROLLOUT_EVERY to it, or write the configured one "
            "with `manage.py setup_periodic_tasks --reset` (`migrate` does when the stored interval is the one it "
            "last wrote).",
            id="rollout.W005",
        )
    ]
