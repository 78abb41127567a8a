"""The refusals of release and root verification, each with a stable code.

The codes are the API's: the server answers 400 ``{"code": <code>, "detail": <detail>}``.
"""

from __future__ import annotations

INVALID_ENVELOPE = "invalid_envelope"
INVALID_MANIFEST = "invalid_manifest"
WRONG_PAYLOAD_TYPE = "wrong_payload_type"
WRONG_PRODUCT = "wrong_product"
THRESHOLD_NOT_MET = "threshold_not_met"
TOO_MANY_SIGNATURES = "too_many_signatures"
# The root chain (docs/signing.md#rotating-the-release-keys).
INVALID_ROOT = "invalid_root"
ROOT_VERSION = "root_version"

CODES = frozenset(
    {
        INVALID_ROOT,
        ROOT_VERSION,
        INVALID_ENVELOPE,
        INVALID_MANIFEST,
        WRONG_PAYLOAD_TYPE,
        WRONG_PRODUCT,
        THRESHOLD_NOT_MET,
        TOO_MANY_SIGNATURES,
    }
)


class ReleaseError(Exception):
    """A release envelope or manifest was refused.

    ``code`` is one of :data:`CODES`; ``detail`` is a human sentence that
    names what was wrong.
    """

    def __init__(self, code: str, detail: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown release error code {code!r}")
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
