"""schemathesis against the live server: no input gets a 5xx, and every answer conforms to the schema.

Every operation of /api/schema/ is fuzzed (positive and negative data, and with
the ids of seeded objects), derandomized, with a bounded number of examples and
a global time budget: the whole test stays well under two minutes on 2 cores.
Failures are collected over all operations and reported together.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleet.models import ApiKey, Permission
from fleet.services.iam import api_key_create
from fleet.services.nodes import node_create
from fleet.services.workflows import workflow_start
from project import celery_app
from rollout.controller.tick import rollouts_tick_all
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from rollout.schedules import periodic_tick_ensure
from tests.factories import fleet, manifest, release_stored, rollout_settings

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MAX_EXAMPLES = 25  # per operation and kind of data (positive, negative, a seeded object's id)
MIN_EXAMPLES = 3
# Seconds for all the fuzzing: a slow machine gets fewer examples per operation, not a slower test.
TIME_BUDGET = 30.0
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@pytest.fixture
def seeded(live_server, settings, tenant, tmp_path):
    """Pools, nodes (one with a known agent token), two releases, a rollout and a workflow."""
    settings.ROLLOUT = rollout_settings(downloads_url=f"{live_server.url}/api/compute/downloads")
    settings.MEDIA_ROOT = tmp_path / "media"
    # Tasks queued here and by the server (ticks, timeouts) run at once, in process: no broker
    # traffic (nothing left in a queue), and more of the controller is fuzzed. (Celery reads its
    # configuration from Django's settings at each access, so the override reaches it.)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert celery_app.conf.task_always_eager
    # 4xx answers are the point of fuzzing: keep their warning lines out of the report (errors still show).
    request_log = logging.getLogger("django.request")
    request_level = request_log.level
    request_log.setLevel(logging.ERROR)
    try:
        nodes = fleet(tenant, {"gpu": (20, "0.1"), "cpu": (5, "0.5")})
        gpu_pool = nodes["gpu"][0].pool
        cpu_pool_id = nodes["cpu"][0].pool_id
        node, agent_token = node_create(tenant=tenant, name="agent-node", pool_id=cpu_pool_id, arch="amd64")
        release_stored(manifest("0.9.0", 1))
        release_stored(manifest("1.0.0", 2))
        rollout = rollout_create(
            tenant=tenant, spec=rollout_spec(version="1.0.0", pool_ids=[str(gpu_pool.id)], soak_seconds=0)
        )
        workflow = workflow_start(tenant=tenant, node_id=nodes["cpu"][1].id, kind="remediation")
        # A controller that ticked, on a schedule the run cannot outlast: /health answers 200 (its 503 when no
        # controller runs is the contract's, and tests/rollout/test_health.py's).
        periodic_tick_ensure(every=3600, reset=True)
        rollouts_tick_all()
        fuzzer_key, key = api_key_create(tenant=tenant, username="fuzzer", grants=[Permission.FLEET_ADMIN])
        # The fuzzer's own key out of reach of a guessed id (the API takes at most 18 digits): a DELETE
        # /apikeys/{id}/ must not revoke it mid-run. It revokes a spare key of its user instead.
        ApiKey.objects.filter(pk=fuzzer_key.pk).update(id=10**18)
        spare, _ = api_key_create(tenant=tenant, username="fuzzer")
        yield {
            "key": key,
            "agent_token": agent_token,
            "ids": {
                "/api/compute/pools/{id}/": str(gpu_pool.id),
                "/api/compute/nodes/{id}/": str(node.id),
                "/api/compute/workflows/{id}/": str(workflow.id),
                "/api/compute/workflows/{id}/finish/": str(workflow.id),
                "/api/compute/rollouts/{id}/": str(rollout.id),
                "/api/compute/rollouts/{id}/nodes/": str(rollout.id),
                "/api/compute/rollouts/{id}/events/": str(rollout.id),
                "/api/compute/rollouts/{id}/gates/": str(rollout.id),
                "/api/compute/rollouts/{id}/pause/": str(rollout.id),
                "/api/compute/rollouts/{id}/resume/": str(rollout.id),
                "/api/compute/rollouts/{id}/abort/": str(rollout.id),
                "/api/compute/rollouts/{id}/promote/": str(rollout.id),
                "/api/compute/apikeys/{id}/": str(spare.id),
            },
        }
    finally:
        request_log.setLevel(request_level)


def _run(operation, strategy, examples: int, call: Callable) -> str | None:
    """Fuzz one strategy; the failure report (with a curl line to reproduce it), or None."""

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time; the report has a curl line
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def fuzz(case):
        call(case)

    try:
        fuzz()
    except (Exception, BaseExceptionGroup) as exc:  # every failure is collected and reported at the end
        return f"{operation.label}: {exc}"
    return None


def test_no_input_gets_a_server_error_and_every_answer_conforms_to_the_schema(live_server, seeded):
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json")
    operations = [result.ok() for result in schema.get_all_operations()]
    key_headers = {"Authorization": f"Bearer {seeded['key']}"}
    agent_headers = {"Authorization": f"Bearer {seeded['agent_token']}"}
    started = time.monotonic()
    calls = 0
    failures: list[str] = []

    for index, operation in enumerate(operations):
        headers = agent_headers if "/agent/" in operation.path else key_headers

        def call(case, headers=headers):
            nonlocal calls
            calls += 1
            response = case.call(base_url=live_server.url, headers=headers, timeout=30)
            case.validate_response(response, checks=CHECKS, headers=headers)

        strategies = [operation.as_strategy(generation_mode=GenerationMode.POSITIVE)]
        if len(operation.body) or any(True for _ in operation.iter_parameters()):
            # An operation that takes no input at all (the health check) has nothing to make invalid.
            strategies.append(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
        known_id = seeded["ids"].get(operation.path)
        if known_id is not None:
            strategies.append(operation.as_strategy(path_parameters={"id": known_id}))
        # Share what is left of the time budget among the operations left, at the pace seen so far.
        elapsed = time.monotonic() - started
        seconds_per_call = elapsed / calls if calls else 0.05
        slot = max(0.0, TIME_BUDGET - elapsed) / (len(operations) - index)
        examples = int(min(MAX_EXAMPLES, max(MIN_EXAMPLES, slot / seconds_per_call / len(strategies))))
        for strategy in strategies:
            failure = _run(operation, strategy, examples, call)
            if failure:
                failures.append(failure)

    assert len(operations) == 48, [operation.label for operation in operations]
    assert calls >= len(operations) * MIN_EXAMPLES
    assert not failures, "\n\n".join(failures)


# --- bodies the schema does not describe: sizes, nesting, unicode, non-objects --------------------

#: Raw bodies no schema-driven generator reaches: each must be refused with a 4xx, never a 5xx.
HOSTILE_BODIES: list[tuple[str, bytes]] = [
    ("larger than 1 MiB", b'{"name": "' + b"x" * (1 << 20) + b'"}'),
    ("nested 10,000 deep", b"[" * 10_000 + b"]" * 10_000),
    ("a lone surrogate key", b'{"name": "p1", "\\ud800": 1}'),
    ("a lone surrogate value", b'{"name": "\\udfff", "kind": "\\ud800"}'),
    ("invalid UTF-8", b'{"name": "\xff\xfe"}'),
    ("a NUL in a string", b'{"name": "a\\u0000b", "version": "1.0\\u0000"}'),
    ("a byte-order mark", b'\xef\xbb\xbf{"name": "p1"}'),
    ("a list", b"[1, 2, 3]"),
    ("a string", b'"rollback"'),
    ("null", b"null"),
    ("NaN", b'{"maxFailureRatio": NaN, "disruptionBudget": Infinity}'),
    ("a huge integer", b'{"soakSeconds": ' + b"9" * 5000 + b"}"),
    ("duplicate keys", b'{"name": "a", "name": "b"}'),
]


def unicode_bodies() -> list[tuple[str, bytes]]:
    """Unicode a person may type: right-to-left marks, combining characters, astral emoji, ideographs, tabs."""
    samples = ["\u202egpu\u202c", "e\u0301\u0301\u0301", "\U0001f680" * 40, "\u4e2d\u6587\u6c60", "\t\n"]
    fields = ("name", "kind", "version", "reason", "url")
    return [
        (f"unicode {index}", json.dumps(dict.fromkeys(fields, text), ensure_ascii=False).encode())
        for index, text in enumerate(samples)
    ]


def test_hostile_bodies_get_a_4xx_on_every_operation_that_takes_one(live_server, seeded):
    import httpx

    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json")
    operations = [result.ok() for result in schema.get_all_operations()]
    with_body = [operation for operation in operations if operation.method.upper() in {"POST", "PATCH", "PUT"}]
    assert with_body
    server_errors = []
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        for operation in with_body:
            key = seeded["agent_token"] if "/agent/" in operation.path else seeded["key"]
            path = operation.path
            for template, value in seeded["ids"].items():
                if template == operation.path:
                    path = template.replace("{id}", value)
            path = path.replace("{id}", "00000000-0000-0000-0000-000000000000").replace("{version}", "1.0.0")
            for what, body in HOSTILE_BODIES + unicode_bodies():
                response = client.request(
                    operation.method.upper(),
                    path,
                    content=body,
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                )
                if response.status_code >= 500:
                    server_errors.append(f"{operation.method.upper()} {path} with {what}: {response.status_code}")
                elif response.status_code >= 400:
                    assert response.json()["code"], (operation.path, what)
    assert not server_errors, "\n".join(server_errors)
