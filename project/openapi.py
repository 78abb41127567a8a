"""Shared pieces of the OpenAPI 3 description (drf-spectacular): error bodies, refinements, extra paths.

- ``error_responses(...)`` builds the ``responses`` entries of one operation's
  refusals, per status, each an error component whose ``code`` is an enum of
  exactly the codes that status can carry there, so a client (and
  schemathesis, tests/api/test_schemathesis.py) can rely on the list. Views
  use it in their ``@extend_schema(responses=...)``.
- Serializers that exist only to describe bodies the views build by hand:
  the DSSE envelope a release is registered with, the dry-run plan.
- Extensions that refine what drf-spectacular cannot infer from the real
  serializers (method fields, fields that take JSON numbers only), without
  copying those serializers.
- ``postprocess_schema``: a postprocessing hook that adds the one endpoint that
  is a plain Django view (the binary downloads); SPECTACULAR_SETTINGS in
  project/settings.py lists it, so /api/schema/ and ``manage.py spectacular`` agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
    OpenApiViewExtension,
)
from drf_spectacular.plumbing import build_array_type, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from rollout.release.dsse import MAX_SIGNATURES, PAYLOAD_TYPE

# --- the error catalog --------------------------------------------------------------------

#: Every code the API answers with, and what it means (the enum descriptions in the schema).
CODES: dict[str, str] = {
    # generic (project/api.py)
    "invalid_input": "The body or a query parameter failed validation (see `errors` or `field`).",
    "invalid_json": "The body is not valid UTF-8 JSON, nests deeper than 64 levels, or holds a lone surrogate.",
    "not_authenticated": "No `Authorization: Bearer` header.",
    "authentication_failed": "The bearer token is malformed, unknown or revoked.",
    "permission_denied": "The API key has no `compute:fleet:admin` grant on its tenant's fleet scope.",
    "not_found": "No such object in the caller's tenant (another tenant's objects are not found either).",
    "unsupported_media_type": "The body is not `application/json`.",
    "too_large": "The body is larger than 1 MiB (refused before it is read).",
    # fleet
    "invalid_name": "The name is empty or too long.",
    "invalid_budget": "`disruptionBudget` is not a number in [0, 1] with at most 5 decimals.",
    "invalid_arch": "`arch` is not 1 to 32 of lowercase letters, digits and `_`.",
    "pool_exists": "The tenant already has a pool of this name.",
    "node_exists": "The tenant already has a node of this name.",
    "unknown_pool": "A pool id is not one of the tenant's pools (for a rollout, `poolIds` lists them).",
    "unknown_node": "`nodeId` is not one of the tenant's nodes.",
    "budget_exhausted": "Starting the workflow would exceed the pool's disruption budget.",
    "workflow_active": "The node already has an active workflow of this kind.",
    "invalid_state": "The object is not in a state that allows this action (`state` says which it is in).",
    # releases
    "invalid_envelope": "The body is not a well-formed DSSE envelope.",
    "invalid_manifest": "The payload is not a well-formed release manifest.",
    "wrong_payload_type": f"`payloadType` is not `{PAYLOAD_TYPE}`.",
    "wrong_product": "The manifest's product is not `bcd`.",
    "threshold_not_met": "Fewer distinct pinned keys signed than the configured threshold.",
    "too_many_signatures": f"The envelope holds more than {MAX_SIGNATURES} signatures.",
    "sequence_not_increasing": "The sequence does not exceed every registered release's (`highestSequence`).",
    "version_exists": "This version is registered with a different manifest.",
    "no_release_keys": "No (valid) release keys are configured: set `ROLLOUT_RELEASE_PINS`.",
    # rollouts
    "unknown_version": "No registered release has this version.",
    "no_nodes": "The chosen pools have no nodes.",
    "invalid_waves": "`waves` are not 1 to 20 strictly increasing percentages in (0, 100] ending at 100.",
    "conflict": "Some snapshotted nodes are already in an active rollout (`nodeIds` lists them).",
    "no_downloads_url": "No downloads URL is configured: set `ROLLOUT_DOWNLOADS_URL`.",
}

AUTH_CODES = ("not_authenticated", "authentication_failed")


def _extra_fields(code: str) -> dict[str, serializers.Field]:
    """Fields some codes add to the body, beside ``code`` and ``detail``."""
    if code == "invalid_input":
        return {
            "field": serializers.CharField(required=False, help_text="The request field at fault."),
            "errors": serializers.DictField(
                required=False, help_text="Per-field messages, as DRF's validation reports them."
            ),
        }
    if code == "unknown_pool":
        return {"poolIds": serializers.ListField(child=serializers.CharField(), required=False)}
    if code == "conflict":
        return {"nodeIds": serializers.ListField(child=serializers.CharField(), help_text="The nodes already taken.")}
    if code == "sequence_not_increasing":
        return {"highestSequence": serializers.IntegerField(required=False)}
    if code == "invalid_state":
        return {"state": serializers.CharField(required=False, help_text="The object's current state.")}
    if code == "budget_exhausted":
        return {"disrupted": serializers.IntegerField(), "allowed": serializers.IntegerField()}
    return {}


class ErrorSerializer(serializers.Serializer):
    """Every error: ``{"code": "<snake_case>", "detail": "<human sentence>"}`` plus fields where useful."""

    code = serializers.CharField(help_text="A stable snake_case code.")
    detail = serializers.CharField(help_text="A human sentence.")


_error_classes: dict[frozenset[str], type[serializers.Serializer]] = {}

#: Names of the code sets several operations share.
_SHARED_NAMES = {frozenset({"invalid_input", "invalid_json"}): "InvalidBodyError"}


def _camel(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


def error_serializer(name: str, codes: Iterable[str]) -> type[serializers.Serializer]:
    """The error body component whose ``code`` is one of ``codes``.

    One component per set of codes, so each enum belongs to one component
    (drf-spectacular then names it ``<component>CodeEnum`` without a
    collision). A set of one code is named after it (``InvalidStateError``);
    a larger set takes ``name``, given by the first operation that uses it.
    """
    codes = tuple(dict.fromkeys(codes))
    unknown = [code for code in codes if code not in CODES]
    if unknown:
        raise ValueError(f"undocumented error code(s) {unknown}: add them to project.openapi.CODES")
    key = frozenset(codes)
    if key in _error_classes:
        return _error_classes[key]
    if len(codes) == 1:
        name = f"{_camel(codes[0])}Error"
    name = _SHARED_NAMES.get(key, name)
    attrs: dict[str, Any] = {
        "code": serializers.ChoiceField(choices=[(code, CODES[code]) for code in codes]),
        "detail": serializers.CharField(help_text="A human sentence."),
        "__doc__": "An error body: " + ", ".join(f"`{code}`" for code in codes) + ".",
        "__module__": __name__,
    }
    for code in codes:
        attrs.update(_extra_fields(code))
    cls = type(f"{name}Serializer", (serializers.Serializer,), attrs)
    _error_classes[key] = cls
    return cls


def _response(status: int, name: str, codes: Sequence[str]) -> OpenApiResponse:
    description = "; ".join(f"`{code}`: {CODES[code]}" for code in codes)
    example_code = codes[0]
    return OpenApiResponse(
        response=error_serializer(name, codes),
        description=description,
        examples=[
            OpenApiExample(
                f"{status} {example_code}",
                value={"code": example_code, "detail": CODES[example_code].replace("`", "")},
                status_codes=[str(status)],
                response_only=True,
            )
        ],
    )


def error_responses(
    name: str,
    *,
    auth: str | None = "key",
    json_body: bool = False,
    body: bool | None = None,
    bad_request: Sequence[str] = (),
    not_found: Sequence[str] = (),
    conflict: Sequence[str] = (),
    unavailable: Sequence[str] = (),
) -> dict[int, OpenApiResponse]:
    """The error ``responses`` of one operation, keyed by status.

    ``auth``: ``"key"`` (an API key with the fleet-admin grant: 401, 403),
    ``"agent"`` (an agent token: 401) or None. ``json_body``: the view parses a
    JSON body (400 ``invalid_json``, 415). ``body``: the view reads a body (413 ``too_large``;
    defaults to ``json_body``). ``name`` prefixes the names of the
    components of sets of several codes (see ``error_serializer``).
    """
    responses: dict[int, OpenApiResponse] = {}
    bad = list(bad_request) + (["invalid_json"] if json_body else [])
    if bad:
        responses[400] = _response(400, f"{name}BadRequest", bad)
    if auth is not None:
        responses[401] = _response(401, "UnauthenticatedError", AUTH_CODES)
    if auth == "key":
        responses[403] = _response(403, "PermissionDenied", ("permission_denied",))
    if not_found:
        responses[404] = _response(404, f"{name}NotFound", not_found)
    if conflict:
        responses[409] = _response(409, f"{name}Conflict", conflict)
    if json_body if body is None else body:
        responses[413] = _response(413, "TooLarge", ("too_large",))
    if json_body:
        responses[415] = _response(415, "UnsupportedMediaType", ("unsupported_media_type",))
    if unavailable:
        responses[503] = _response(503, f"{name}Unavailable", unavailable)
    return responses


# --- bodies the views build by hand -----------------------------------------------------------


class DsseSignatureSerializer(serializers.Serializer):
    keyid = serializers.CharField(
        required=False,
        help_text="A hint: the pin `sha256/<base64>` of the signing key. A signature whose keyid matches "
        "no pin is tried against every pinned key not yet counted.",
    )
    sig = serializers.CharField(
        help_text="Base64 (standard or URL-safe) of the signature over DSSE's PAE: "
        '`"DSSEv1" SP LEN(payloadType) SP payloadType SP LEN(payload) SP payload`.'
    )


class DsseEnvelopeSerializer(serializers.Serializer):
    """A DSSE envelope carrying a release manifest (CONTRACT 3.3). At most 1 MiB; strict JSON."""

    payloadType = serializers.ChoiceField(choices=[(PAYLOAD_TYPE, PAYLOAD_TYPE)])
    payload = serializers.CharField(
        help_text="Base64 (standard or URL-safe) of the manifest bytes, exactly as signed: a UTF-8 JSON "
        'object {"product": "bcd", "version": "1.4.0", "sequence": 7, "protocolVersion": 3, '
        '"binaries": {"linux-amd64": {"sha256": "<64 lowercase hex>", "size": 12345678}}, '
        '"notes": "optional"}. Unknown fields and duplicate keys are refused.'
    )
    signatures = serializers.ListField(child=DsseSignatureSerializer(), min_length=1, max_length=MAX_SIGNATURES)


ENVELOPE_EXAMPLE = OpenApiExample(
    "A release signed by one key",
    request_only=True,
    value={
        "payloadType": PAYLOAD_TYPE,
        "payload": "eyJiaW5hcmllcyI6eyJsaW51eC1hbWQ2NCI6eyJzaGEyNTYiOiIuLi4iLCJzaXplIjoxMjM0NX19LCJwcm9kdWN0Ijoi"
        "YmNkIiwic2VxdWVuY2UiOjcsInZlcnNpb24iOiIxLjQuMCJ9",
        "signatures": [{"keyid": "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", "sig": "MEUCIQ..."}],
    },
)


class ReleaseBinarySerializer(serializers.Serializer):
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")
    size = serializers.IntegerField(min_value=0)
    url = serializers.CharField(
        allow_null=True, help_text="`{downloadsUrl}/bcd/{version}/{platform}`; null without a downloads URL."
    )


class DaemonSectionSerializer(serializers.Serializer):
    """A node's desired daemon: what its agent must run."""

    version = serializers.CharField()
    url = serializers.CharField()
    sha256 = serializers.CharField()


class NodeSpecSerializer(serializers.Serializer):
    """A node's desired state."""

    daemon = DaemonSectionSerializer(allow_null=True)


class AgentCommandSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField(help_text="For example `daemon.upgrade`.")
    payload = serializers.DictField()


class RolloutWaveSerializer(serializers.Serializer):
    """One wave of a rollout with its nodes counted by upgrade state."""

    index = serializers.IntegerField(min_value=0)
    percent = serializers.FloatField(help_text="The cumulative percentage requested for this wave.")
    total = serializers.IntegerField(min_value=0)
    pending = serializers.IntegerField(min_value=0)
    inFlight = serializers.IntegerField(min_value=0)
    succeeded = serializers.IntegerField(min_value=0)
    failed = serializers.IntegerField(min_value=0)
    skipped = serializers.IntegerField(min_value=0)
    rolledBack = serializers.IntegerField(min_value=0)
    cancelled = serializers.IntegerField(min_value=0)
    startedAt = serializers.DateTimeField(allow_null=True)
    settledAt = serializers.DateTimeField(allow_null=True)


class PlannedWaveSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    percent = serializers.FloatField()
    total = serializers.IntegerField(min_value=1)
    pools = serializers.DictField(child=serializers.IntegerField(), help_text="Nodes of this wave per pool id.")


class PlannedBudgetSerializer(serializers.Serializer):
    allowed = serializers.IntegerField(help_text="ceil(disruptionBudget x nodes in the pool).")
    inUse = serializers.IntegerField(help_text="Nodes of the pool disrupted now.")


class RolloutPlanSerializer(serializers.Serializer):
    """The answer of a dry run (``?dryRun=true``): what a create would do. Nothing is written."""

    version = serializers.CharField()
    poolIds = serializers.ListField(child=serializers.CharField())
    nodes = serializers.IntegerField(min_value=1)
    waves = PlannedWaveSerializer(many=True)
    budgets = serializers.DictField(child=PlannedBudgetSerializer(), help_text="Per pool id.")
    maxFailureRatio = serializers.FloatField()
    soakSeconds = serializers.IntegerField()
    upgradeTimeoutSeconds = serializers.IntegerField()
    estimatedSeconds = serializers.IntegerField(
        allow_null=True,
        help_text="Worst case (every node takes the whole timeout); null when a pool's budget allows no node.",
    )


DRY_RUN = OpenApiParameter(
    "dryRun",
    OpenApiTypes.BOOL,
    description="`true`: check everything a create would and answer 200 with the plan; write nothing.",
)


# --- refinements of the real serializers ---------------------------------------------------------


def _refine(auto_schema, serializer, direction, properties: dict[str, Any] | None = None) -> dict:
    """The schema drf-spectacular makes of a response serializer, with ``properties`` replaced.

    Every field of these serializers is always rendered, so all are required
    (a ModelSerializer field whose model field has a default would be optional).
    """
    schema = auto_schema._map_serializer(serializer, direction, bypass_extensions=True)
    for name, value in (properties or {}).items():
        if isinstance(value, type) and issubclass(value, serializers.Serializer):
            value = auto_schema.resolve_serializer(value, direction).ref
        description = schema["properties"].get(name, {}).get("description")
        schema["properties"][name] = {**value, **({"description": description} if description else {})}
    schema["required"] = sorted(schema["properties"])
    return schema


class RolloutRefinement(OpenApiSerializerExtension):
    target_class = "rollout.api.serializers.RolloutSerializer"

    def map_serializer(self, auto_schema, direction):
        return _refine(
            auto_schema,
            self.target,
            direction,
            {
                "waves": build_array_type(auto_schema.resolve_serializer(RolloutWaveSerializer, direction).ref),
                "poolIds": build_array_type(build_basic_type(OpenApiTypes.STR)),
            },
        )


class ReleaseRefinement(OpenApiSerializerExtension):
    target_class = "rollout.api.serializers.ReleaseSerializer"

    def map_serializer(self, auto_schema, direction):
        binary = auto_schema.resolve_serializer(ReleaseBinarySerializer, direction).ref
        return _refine(
            auto_schema,
            self.target,
            direction,
            {"binaries": {"type": "object", "additionalProperties": binary, "description": "Per `linux-<arch>`."}},
        )


class PoolRefinement(OpenApiSerializerExtension):
    target_class = "project.fleet.api.serializers.PoolSerializer"

    def map_serializer(self, auto_schema, direction):
        from project.fleet.api.serializers import PolicySerializer

        return _refine(auto_schema, self.target, direction, {"policy": PolicySerializer})


class NodeRefinement(OpenApiSerializerExtension):
    target_class = "project.fleet.api.serializers.NodeSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        return _refine(auto_schema, self.target, direction, {"spec": NodeSpecSerializer})


class AgentSessionRefinement(OpenApiSerializerExtension):
    target_class = "project.fleet.api.serializers.AgentSessionSerializer"

    def map_serializer(self, auto_schema, direction):
        command = auto_schema.resolve_serializer(AgentCommandSerializer, direction).ref
        return _refine(
            auto_schema, self.target, direction, {"spec": NodeSpecSerializer, "commands": build_array_type(command)}
        )


class NodeUpgradeRefinement(OpenApiSerializerExtension):
    target_class = "rollout.api.serializers.NodeUpgradeSerializer"

    def map_serializer(self, auto_schema, direction):
        return _refine(auto_schema, self.target, direction)


class RolloutEventRefinement(OpenApiSerializerExtension):
    target_class = "rollout.api.serializers.RolloutEventSerializer"

    def map_serializer(self, auto_schema, direction):
        return _refine(auto_schema, self.target, direction, {"data": {"type": "object", "additionalProperties": {}}})


class FractionFieldSchema(OpenApiSerializerFieldExtension):
    """A JSON number in [0, 1] (drf-spectacular would describe a DecimalField as a string)."""

    target_class = "project.fleet.api.fields.FractionField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "number", "minimum": 0, "maximum": 1, "description": "A fraction, at most 5 decimals."}


class StrictNumberFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "project.fleet.api.fields.StrictNumberField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "number"}


class RolloutViewSetSchema(OpenApiViewExtension):
    """RolloutViewSet's queryset needs the caller's tenant; the schema only needs the model."""

    target_class = "rollout.api.views.RolloutViewSet"

    def view_replacement(self):
        from rollout.models import Rollout

        class Fixed(self.target_class):
            queryset = Rollout.objects.none()

        return Fixed


# --- the downloads endpoint (a plain Django view) -----------------------------------------------

DOWNLOADS_PATH = "/api/compute/downloads/bcd/{version}/{platform}"


def downloads_operation() -> dict[str, Any]:
    return {
        "operationId": "compute_downloads_retrieve",
        "summary": "The bytes of a registered binary",
        "description": "`{downloadsUrl}/bcd/{version}/linux-{arch}` when this server stores the binaries "
        "(`manage.py release upload`). Unauthenticated on purpose: agents check the sha256 of the signed "
        "manifest before running anything. `X-Checksum-Sha256` carries that sha256.",
        "tags": ["compute"],
        "security": [{}],
        "parameters": [
            {
                "name": "version",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$"},
            },
            {
                "name": "platform",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^linux-[a-z0-9_]+$"},
                "example": "linux-amd64",
            },
        ],
        "responses": {
            "200": {
                "description": "The binary.",
                "headers": {"X-Checksum-Sha256": {"schema": {"type": "string"}}},
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            },
            "404": {
                "description": "No such release or platform, or its bytes were not uploaded.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NotFoundError"}}},
            },
        },
    }


def postprocess_schema(result: dict, generator: Any, **kwargs: Any) -> dict:
    """Add the downloads endpoint, which is a plain Django view drf-spectacular does not see."""
    result.setdefault("paths", {})[DOWNLOADS_PATH] = {"get": downloads_operation()}
    return result
