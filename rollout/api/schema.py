"""The rollout module's part of the OpenAPI description (drf-spectacular).

- Its error codes (registered in the shared catalog, core/openapi.py).
- Serializers that exist only to describe bodies the views build by hand:
  the DSSE envelope a release is registered with, the dry-run plan.
  (The real serializers, rollout/api/serializers.py, describe their method
  fields with ``@extend_schema_field``.)
- ``postprocess_schema``: a postprocessing hook that adds the one endpoint that
  is a plain Django view (the binary downloads); SPECTACULAR_SETTINGS in
  project/settings.py lists it, so /api/schema/ and ``manage.py spectacular`` agree.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter
from rest_framework import serializers

from core.openapi import error_responses, register_codes
from rollout.release.dsse import MAX_SIGNATURES, PAYLOAD_TYPE

__all__ = ["error_responses"]

register_codes(
    {
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
        "release_expired": "The release's signed manifest has expired: it is never registered nor sent to a node.",
        "root_expired": "The newest root of the key chain has expired: register a new root first.",
        # the root chain
        "invalid_root": "The body is not a well-formed root envelope, or the root has already expired.",
        "root_version": "The root's version is not the newest root's + 1 (`currentVersion`): a skipped version "
        "or a fork.",
        # rollouts
        "unknown_version": "No registered release has this version.",
        "unknown_pool": "A pool id is not one of the tenant's pools (for a rollout, `poolIds` lists them).",
        "no_nodes": "The chosen pools have no nodes.",
        "invalid_waves": "`waves` are not 1 to 20 strictly increasing percentages in (0, 100] ending at 100.",
        "conflict": "Some snapshotted nodes are already held by another rollout, active, paused, scheduled or "
        "awaiting approval (`nodeIds` lists them, `rolloutIds` the rollouts that hold them; `detail` names their "
        "states).",
        "binary_missing": "The release has no stored binary for the platform of a snapshotted node (`platforms`): "
        "upload it first.",
        "sequence_rollback": "Every chosen node runs a release of a higher sequence, and nodes refuse older "
        "releases: sign the old binary again with a higher sequence to roll back.",
        "no_downloads_url": "No downloads URL is configured: set `ROLLOUT_DOWNLOADS_URL`.",
        "invalid_gate": "A gate is not valid: more than 8, a bad name, PromQL over 4 KiB, no Prometheus configured, "
        "or an HTTP gate's URL outside ROLLOUT_GATE_URL_ALLOW or resolving to an address gates may not call.",
        "release_blocked": "The release is blocked in this tenant (`POST /releases/{version}/unblock/` lifts it).",
        "invalid_schedule": "`startAt` or `endBy` is not an RFC 3339 time with an offset, `startAt` is more than a "
        "minute past, `endBy` is not after now and after `startAt`, or `endBehavior` is not `pause`, `abort` or "
        "`abort_rollback` (`field` names it).",
        "invalid": "Fields that are valid alone but not together (`field` names the one at fault): `endBehavior` "
        "without `endBy`.",
        "deadline_passed": "The rollout's `endBy` has passed: resume with a later `endBy` in the body.",
        "supersede_invalid": "The rollout `supersedes` names cannot be superseded: it is finished (`reason` "
        "`finished`), or its release is not older than the new one (`not_newer`).",
        "self_approval": "The rollout's creator cannot approve it: another user with `compute:rollout:approve` must.",
        "already_approved": "This user already approved the rollout.",
        # webhooks
        "invalid_url": "The webhook URL is not https:// (http:// needs ROLLOUT_WEBHOOKS_ALLOW_HTTP=1) or points "
        "at an address webhooks may not call (link-local, metadata, private).",
        "invalid_events": "`events` is not a non-empty list of known rollout events.",
        "invalid_secret": "`secret` is not 16 to 200 printable characters.",
    },
    {
        "unknown_pool": {"poolIds": serializers.ListField(child=serializers.CharField(), required=False)},
        "conflict": {
            "nodeIds": serializers.ListField(child=serializers.CharField(), help_text="The nodes already taken."),
            "rolloutIds": serializers.ListField(
                child=serializers.CharField(),
                help_text="The rollouts that hold them (active, paused, scheduled or awaiting approval).",
            ),
        },
        "binary_missing": {
            "platforms": serializers.ListField(
                child=serializers.CharField(),
                required=False,  # the create's 400 body is one schema for every code: only binary_missing has it
                help_text="`linux-<arch>` platforms with no stored binary.",
            )
        },
        "invalid_schedule": {"field": serializers.CharField(required=False, help_text="The schedule field.")},
        "invalid": {"field": serializers.CharField(required=False, help_text="The field at fault.")},
        "supersede_invalid": {
            "reason": serializers.ChoiceField(choices=["finished", "not_newer"], required=False),
            "rolloutId": serializers.CharField(required=False, help_text="The rollout `supersedes` names."),
        },
        "deadline_passed": {"endBy": serializers.DateTimeField(required=False, help_text="The deadline that passed.")},
        "sequence_not_increasing": {"highestSequence": serializers.IntegerField(required=False)},
        "root_version": {"currentVersion": serializers.IntegerField(required=False)},
    },
)


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
    """A DSSE envelope carrying a release manifest (docs/signing.md#the-envelope-dsse). At most 1 MiB; strict JSON."""

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


DRY_RUN = OpenApiParameter(
    "dryRun",
    OpenApiTypes.BOOL,
    description="`true`: check everything a create would and answer 200 with the plan; write nothing.",
)


# --- the downloads endpoint (a plain Django view) -----------------------------------------------

DOWNLOADS_PATH = "/api/compute/downloads/bcd/{version}/{platform}"


def downloads_operation() -> dict[str, Any]:
    return {
        "operationId": "compute_downloads_retrieve",
        "summary": "The bytes of a registered binary",
        "description": "`{downloadsUrl}/bcd/{version}/linux-{arch}` when this server stores the binaries "
        "(`manage.py release upload`). Unauthenticated on purpose: agents check the sha256 of the signed "
        "manifest before running anything. `X-Checksum-Sha256` carries that sha256, the strong `ETag` is "
        '`"<sha256>"`; one `Range` (206), `If-Range`, `If-None-Match` (304) and `HEAD` are honoured on every '
        "path (docs/api.md#binary-downloads). With `ROLLOUT_DOWNLOADS_OFFLOAD=redirect` the answer is a 302 "
        "to a presigned URL of the object.",
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
            "206": {
                "description": "One range of the binary (`Content-Range: bytes a-b/size`).",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            },
            "302": {"description": "`redirect` mode: the presigned URL of the object is in `Location`."},
            "304": {"description": "`If-None-Match` names the binary's ETag."},
            "416": {"description": "No satisfiable range: `Content-Range: bytes */size`."},
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
