"""The OpenAPI 3 description (drf-spectacular): valid, complete, and naming every error code of docs/api.md."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import URLResolver, get_resolver
from openapi_spec_validator import validate

API_PREFIX = "/api/compute/"


@pytest.fixture(scope="module")
def schema() -> dict:
    """The schema as served at /api/schema/ (what Swagger UI and clients read)."""
    from django.test import Client

    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def _template(route: str) -> str:
    """A Django route or regex as an OpenAPI-style template with anonymous parameters: /a/{}/b/."""
    out: list[str] = []
    i = 0
    while i < len(route):
        if route.startswith("(?P<", i):
            depth, j = 0, i
            while True:
                if route[j] == "\\":
                    j += 2
                    continue
                depth += {"(": 1, ")": -1}.get(route[j], 0)
                if depth == 0:
                    break
                j += 1
            out.append("{}")
            i = j + 1
        elif route[i] == "<":
            out.append("{}")
            i = route.index(">", i) + 1
        elif route[i] in "^$":
            i += 1
        else:
            out.append(route[i])
            i += 1
    return "/" + "".join(out).lstrip("/")


def _url_operations() -> set[tuple[str, str]]:
    """(method, template) of every URL pattern under /api/compute/, from the URLconf itself."""

    def walk(patterns, prefix: str = ""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern.callback

    operations = set()
    for route, callback in walk(get_resolver().url_patterns):
        template = _template(route)
        if not template.startswith(API_PREFIX):
            continue
        if getattr(callback, "actions", None):  # a viewset route (DRF adds "head" to it once served)
            methods = set(callback.actions) - {"head", "options"}
        elif getattr(callback, "cls", None):  # an APIView
            cls = callback.cls
            methods = {m for m in cls.http_method_names if hasattr(cls, m) and m not in {"options", "head"}}
        else:  # a plain Django view (the downloads): GET
            methods = {"get"}
        operations |= {(method, template) for method in methods}
    return operations


def _schema_operations(schema: dict) -> set[tuple[str, str]]:
    operations = set()
    for path, item in schema["paths"].items():
        template = _template(path.replace("{", "<").replace("}", ">"))
        operations |= {(method, template) for method in item if method in {"get", "post", "put", "patch", "delete"}}
    return operations


def test_the_served_schema_is_a_valid_openapi_3_document(schema):
    assert schema["openapi"].startswith("3.")
    validate(schema)


def test_manage_py_spectacular_validates_without_a_warning_and_matches_the_served_schema(tmp_path, schema):
    args = ["--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(tmp_path / "schema.json")]
    call_command("spectacular", *args)  # raises SchemaGenerationError on any warning or error
    generated = json.loads((tmp_path / "schema.json").read_text())
    validate(generated)
    assert generated["paths"].keys() == schema["paths"].keys()


def test_every_url_pattern_under_api_compute_is_described_and_nothing_else(schema):
    in_urls = _url_operations()
    in_schema = {op for op in _schema_operations(schema) if op[1].startswith(API_PREFIX)}
    assert len(in_urls) >= 24
    assert in_urls - in_schema == set(), "URL patterns missing from the schema"
    assert in_schema - in_urls == set(), "schema operations with no URL pattern"


def _error_codes(schema: dict, operation: dict, status: int) -> set[str]:
    response = operation["responses"].get(str(status))
    assert response is not None, f"{operation['operationId']} documents no {status}"
    ref = response["content"]["application/json"]["schema"]["$ref"]
    component = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert {"code", "detail"} <= set(component["required"])
    code = component["properties"]["code"]
    enum_ref = code.get("$ref") or code["allOf"][0]["$ref"]
    return set(schema["components"]["schemas"][enum_ref.rsplit("/", 1)[1]]["enum"])


# Every credential may be over its request limit (docs/operations.md#request-limits).
THROTTLED = {429: {"throttled"}}
AUTH = {401: {"not_authenticated", "authentication_failed"}, 403: {"permission_denied"}, **THROTTLED}
AGENT = {401: {"not_authenticated", "authentication_failed"}, **THROTTLED}
BODY = {413: {"too_large"}, 415: {"unsupported_media_type"}}

# (method, path): {status: codes that must be documented}, from docs/api.md and the services.
DOCUMENTED_ERRORS: dict[tuple[str, str], dict[int, set[str]]] = {
    ("get", "/api/compute/pools/"): {**AUTH, 400: {"invalid_input"}},
    ("post", "/api/compute/pools/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json", "invalid_name", "invalid_budget"},
        409: {"pool_exists"},
    },
    ("get", "/api/compute/pools/{id}/"): {**AUTH, 404: {"not_found"}},
    ("get", "/api/compute/nodes/"): {**AUTH, 400: {"invalid_input"}},
    ("post", "/api/compute/nodes/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json", "unknown_pool", "invalid_arch", "invalid_name"},
        409: {"node_exists"},
    },
    ("get", "/api/compute/nodes/{id}/"): {**AUTH, 404: {"not_found"}},
    ("get", "/api/compute/workflows/"): {**AUTH, 400: {"invalid_input"}},
    ("post", "/api/compute/workflows/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json", "unknown_node"},
        409: {"budget_exhausted", "workflow_active"},
    },
    ("get", "/api/compute/workflows/{id}/"): {**AUTH, 404: {"not_found"}},
    ("post", "/api/compute/workflows/{id}/finish/"): {**AUTH, 404: {"not_found"}, 409: {"invalid_state"}},
    ("get", "/api/compute/releases/"): {**AUTH, 400: {"invalid_input"}},
    ("post", "/api/compute/releases/"): {
        **AUTH,
        413: {"too_large"},
        400: {
            "invalid_envelope",
            "invalid_manifest",
            "wrong_payload_type",
            "wrong_product",
            "threshold_not_met",
            "too_many_signatures",
        },
        409: {"sequence_not_increasing", "version_exists"},
        503: {"no_release_keys"},
    },
    ("get", "/api/compute/rollouts/"): {**AUTH, 400: {"invalid_input"}},
    ("post", "/api/compute/rollouts/"): {
        **AUTH,
        **BODY,
        400: {
            "invalid_input",
            "invalid_json",
            "invalid_waves",
            "unknown_version",
            "unknown_pool",
            "no_nodes",
            "binary_missing",
            "sequence_rollback",
            "supersede_invalid",
        },
        404: {"not_found"},  # supersedes names no rollout of the tenant
        409: {"conflict"},
        503: {"no_downloads_url"},
    },
    ("get", "/api/compute/rollouts/{id}/"): {**AUTH, 404: {"not_found"}},
    ("get", "/api/compute/rollouts/{id}/nodes/"): {**AUTH, 400: {"invalid_input"}, 404: {"not_found"}},
    ("get", "/api/compute/rollouts/{id}/events/"): {**AUTH, 400: {"invalid_input"}, 404: {"not_found"}},
    ("post", "/api/compute/rollouts/{id}/pause/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json"},
        404: {"not_found"},
        409: {"invalid_state"},
    },
    ("post", "/api/compute/rollouts/{id}/resume/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json", "invalid_schedule"},
        404: {"not_found"},
        409: {"invalid_state", "release_blocked", "deadline_passed"},
    },
    ("post", "/api/compute/rollouts/{id}/abort/"): {
        **AUTH,
        **BODY,
        400: {"invalid_input", "invalid_json"},
        404: {"not_found"},
        409: {"invalid_state"},
    },
    ("post", "/api/compute/agent/session"): {
        **AGENT,
        **BODY,
        400: {"invalid_input", "invalid_json"},
        503: {"refusal_not_recorded", "overloaded"},
    },
    ("delete", "/api/compute/agent/session"): {**AGENT, 503: {"overloaded"}},
    ("post", "/api/compute/agent/commands/{command_id}/ack"): {
        **AGENT,
        **BODY,
        400: {"invalid_input", "invalid_json"},
        404: {"not_found"},
    },
}


@pytest.mark.parametrize(("method", "path"), sorted(DOCUMENTED_ERRORS))
def test_every_error_status_and_code_is_documented(schema, method, path):
    operation = schema["paths"][path][method]
    for status, codes in DOCUMENTED_ERRORS[method, path].items():
        assert codes <= _error_codes(schema, operation, status), (status, codes)
    documented = {int(status) for status in operation["responses"] if int(status) >= 400}
    assert documented == set(DOCUMENTED_ERRORS[method, path]), "an undocumented or unexpected error status"


LISTS = [
    "/api/compute/pools/",
    "/api/compute/nodes/",
    "/api/compute/workflows/",
    "/api/compute/releases/",
    "/api/compute/release-roots/",
    "/api/compute/agent/release-roots",
    "/api/compute/rollouts/",
    "/api/compute/rollouts/{id}/nodes/",
    "/api/compute/rollouts/{id}/events/",
    "/api/compute/audit/",
    "/api/compute/webhooks/",
    "/api/compute/webhooks/{id}/deliveries/",
]


@pytest.mark.parametrize("path", LISTS)
def test_every_list_documents_limit_cursor_and_a_page_of_results(schema, path):
    operation = schema["paths"][path]["get"]
    params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
    assert params["cursor"]["schema"] == {"type": "string"}
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert page["required"] == ["results", "next"]
    assert page["properties"]["results"]["type"] == "array"
    assert page["properties"]["next"]["nullable"] is True


#: Bare arrays the API promises as such, each bounded: a rollout's gates (at most 8).
BARE_ARRAYS = {"/api/compute/rollouts/{id}/gates/"}


def test_every_list_under_api_compute_is_paginated(schema):
    """A GET answering an array is a list: it must be one of LISTS (a new list must paginate)."""
    for path, item in schema["paths"].items():
        if path in BARE_ARRAYS:
            body = item["get"]["responses"]["200"]["content"]["application/json"]["schema"]
            assert body["type"] == "array", path  # described as the plain list it is
            continue
        operation = item.get("get")
        if not path.startswith(API_PREFIX) or operation is None or "200" not in operation["responses"]:
            continue
        content = operation["responses"]["200"].get("content", {}).get("application/json")
        if content is None:
            continue
        body = content["schema"]
        if "$ref" in body:
            body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        assert body.get("type") != "array", f"{path} answers a bare array: paginate it"
        if "results" in body.get("properties", {}):
            assert path in LISTS, path


def test_the_release_body_is_a_json_dsse_envelope(schema):
    body = schema["paths"]["/api/compute/releases/"]["post"]["requestBody"]
    assert body["required"] is True
    assert list(body["content"]) == ["application/json"]
    envelope = schema["components"]["schemas"]["DsseEnvelope"]
    assert set(envelope["required"]) == {"payloadType", "payload", "signatures"}
    assert envelope["properties"]["signatures"]["maxItems"] == 16
    signature = schema["components"]["schemas"]["DsseSignature"]
    assert set(signature["properties"]) == {"keyid", "sig"}
    assert signature["required"] == ["sig"]


def test_the_rollout_create_documents_the_dry_run_and_both_answers(schema):
    operation = schema["paths"]["/api/compute/rollouts/"]["post"]
    assert any(p["name"] == "dryRun" and p["in"] == "query" for p in operation["parameters"])
    assert operation["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/Rollout")
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/RolloutPlan")
    conflict = schema["components"]["schemas"]["ConflictError"]
    assert {"nodeIds", "rolloutIds"} <= set(conflict["properties"])


def test_every_operation_except_the_downloads_needs_a_bearer_token(schema):
    schemes = schema["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            expected = [{"apiKey": []}]
            if "/agent/" in path:
                expected = [{"agentToken": []}]
            elif "/downloads/" in path or path == "/api/compute/health":
                expected = [{}]
            assert operation["security"] == expected, (method, path)


@pytest.mark.django_db
def test_the_schema_and_docs_are_public_and_hold_no_tenant_data(tenant):
    """Public on purpose (docs/api.md): generated from the code, never from the database."""
    from django.test import Client

    from fleet.models import Pool

    Pool.objects.create(tenant=tenant, name="secret-pool-name")
    client = Client()
    body = client.get("/api/schema/", {"format": "json"})
    assert body.status_code == 200
    assert b"secret-pool-name" not in body.content
    assert f'"{tenant.slug}"'.encode() not in body.content
    assert client.get("/api/docs/").status_code == 200
