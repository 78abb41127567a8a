"""The release manifest: the signed payload of a release envelope (docs/signing.md#the-manifest).

Parsing is strict: a manifest is refused unless it is exactly the documented
shape. The strict JSON reader and the timestamp parser here are shared with
the envelope and root parsers.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rollout.release.errors import INVALID_MANIFEST, WRONG_PRODUCT, ReleaseError

PRODUCT = "bcd"
MAX_INT64 = (1 << 63) - 1
# protocolVersion is stored in a PositiveIntegerField: keep it within a signed 32-bit integer.
MAX_PROTOCOL_VERSION = (1 << 31) - 1
# ``linux-`` + at most 32 characters of arch: the platform fits the 40 characters the registry stores.
MAX_ARCH_LENGTH = 32

VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
PLATFORM_RE = re.compile(r"linux-([a-z0-9_]{1,%d})" % MAX_ARCH_LENGTH)  # noqa: UP031 (a regex, not a message)
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# RFC 3339 in UTC, ending in Z: 2030-01-31T12:00:00Z, with an optional fraction of 1 to 9 digits.
TIMESTAMP_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z")

REQUIRED_FIELDS = ("product", "version", "sequence", "binaries")
OPTIONAL_FIELDS = ("protocolVersion", "notes", "expires")
BINARY_FIELDS = ("sha256", "size")


@dataclass(frozen=True)
class Binary:
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    product: str
    version: str
    sequence: int
    protocol_version: int | None
    binaries: dict[str, Binary]
    notes: str | None
    #: After this instant no node may install the release (docs/signing.md#expiry); None: never expires.
    expires: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and self.expires <= now


def shown(text: str, limit: int = 64) -> str:
    """``repr`` of untrusted text, cut to ``limit`` characters so that error details stay short."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _names(names: list[str]) -> str:
    listed = ", ".join(shown(name) for name in names[:5])
    return listed + (f" and {len(names) - 5} more" if len(names) > 5 else "")


class StrictJSONError(ValueError):
    """The bytes are not strict JSON (see :func:`loads_strict`). The message reads after a subject."""


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"has the key {shown(key)} twice in one object")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise StrictJSONError(f"contains {name}, which strict JSON does not allow")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"contains the number {shown(text, 40)}, too large for a double (Infinity)")
    return value


#: What no string of a release may hold, anywhere (keys too): PostgreSQL stores neither a NUL nor a lone surrogate,
#: and the envelope is stored, and copied into every upgraded node's spec.
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


def _check_strings(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _NOT_TEXT.search(item):
                raise StrictJSONError("holds a NUL character or a lone surrogate (\\ud800-\\udfff), which is not text")
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def loads_strict(raw: bytes) -> Any:
    """Parse UTF-8 JSON strictly.

    Refuses invalid UTF-8 (and a byte-order mark), duplicate object keys at
    any depth, ``NaN``/``Infinity`` (a number too large for a double too),
    integers beyond Python's digit limit, nesting beyond the recursion limit,
    and a NUL or a lone surrogate in any string, each with a
    :class:`StrictJSONError`. Floats are returned as ``float``: callers that
    want integers check ``type(x) is int`` and so refuse ``1.0`` and booleans.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError(f"is not valid UTF-8 (at byte {exc.start})") from None
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_no_constants, parse_float=_finite
        )
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("is nested too deeply") from None
    except ValueError:  # an integer with more digits than int() accepts (sys.get_int_max_str_digits())
        raise StrictJSONError("contains a number with too many digits") from None
    _check_strings(value)
    return value


def _invalid(detail: str) -> ReleaseError:
    return ReleaseError(INVALID_MANIFEST, detail)


def parse_timestamp(value: Any) -> datetime:
    """An RFC 3339 timestamp in UTC ending in ``Z`` (``2030-01-31T12:00:00Z``), as an aware datetime.

    Strict: ``T`` and ``Z`` upper case, no offset other than ``Z``, a fraction of at most 9 digits
    (kept to the microsecond, rounded down), no leap second. ValueError otherwise.
    """
    match = TIMESTAMP_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("must be an RFC 3339 timestamp in UTC ending in Z, for example 2030-01-31T12:00:00Z")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    microsecond = int((match.group(7) or "0").ljust(6, "0")[:6])
    try:
        return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid date and time") from None


def format_timestamp(at: datetime) -> str:
    """``at`` as RFC 3339 in UTC ending in Z (no fraction when it has none), as ``parse_timestamp`` reads it."""
    text = at.astimezone(UTC).replace(tzinfo=None).isoformat()
    return text + "Z"


def _is_int(value: Any) -> bool:
    return type(value) is int  # not bool, not float


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return f"the number {value!r} written with a fraction or exponent"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__  # pragma: no cover (json yields nothing else)


def _safe_text(value: str) -> bool:
    """No NUL and no lone surrogates: the text can be stored and re-encoded as UTF-8."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int_field(name: str, value: Any, *, minimum: int, maximum: int) -> int:
    if not _is_int(value):
        raise _invalid(f"The manifest field {name} must be an integer, not {_describe(value)}.")
    if not minimum <= value <= maximum:
        raise _invalid(f"The manifest field {name} must be between {minimum} and {maximum}; it is {value}.")
    return value


def _binary(platform: str, value: Any) -> Binary:
    where = f"binaries[{platform!r}]"
    if not isinstance(value, dict):
        raise _invalid(f"The manifest field {where} must be an object with sha256 and size, not {_describe(value)}.")
    unknown = sorted(set(value) - set(BINARY_FIELDS))
    if unknown:
        raise _invalid(f"The manifest field {where} has unknown field(s): {_names(unknown)}.")
    missing = [field for field in BINARY_FIELDS if field not in value]
    if missing:
        raise _invalid(f"The manifest field {where} is missing {_names(missing)}.")
    sha256 = value["sha256"]
    if not isinstance(sha256, str) or not SHA256_RE.fullmatch(sha256):
        raise _invalid(f"The manifest field {where}.sha256 must be 64 lowercase hexadecimal characters.")
    size = _int_field(f"{where}.size", value["size"], minimum=0, maximum=MAX_INT64)
    return Binary(sha256=sha256, size=size)


def manifest_from_dict(data: Any) -> Manifest:
    """Validate a decoded manifest (docs/signing.md#the-manifest). Raises ReleaseError."""
    if not isinstance(data, dict):
        raise _invalid(f"The manifest must be a JSON object, not {_describe(data)}.")

    product = data.get("product")
    if isinstance(product, str) and product != PRODUCT:
        raise ReleaseError(
            WRONG_PRODUCT, f"The manifest is for product {shown(product)}; only {PRODUCT!r} is accepted."
        )

    unknown = sorted(set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise _invalid(f"The manifest has unknown field(s): {_names(unknown)}.")
    missing = [field for field in REQUIRED_FIELDS if field not in data]
    if missing:
        raise _invalid(f"The manifest is missing the required field(s): {_names(missing)}.")

    if product != PRODUCT:
        raise _invalid(f"The manifest field 'product' must be the string {PRODUCT!r}, not {_describe(product)}.")

    version = data["version"]
    if not isinstance(version, str):
        raise _invalid(f"The manifest field 'version' must be a string, not {_describe(version)}.")
    if not VERSION_RE.fullmatch(version):
        raise _invalid(
            f"The manifest field 'version' {shown(version)} is not 1 to 64 of A-Za-z0-9._+- "
            "starting with a letter or digit."
        )

    sequence = _int_field("'sequence'", data["sequence"], minimum=1, maximum=MAX_INT64)

    binaries_raw = data["binaries"]
    if not isinstance(binaries_raw, dict):
        raise _invalid(f"The manifest field 'binaries' must be an object, not {_describe(binaries_raw)}.")
    if not binaries_raw:
        raise _invalid("The manifest field 'binaries' must name at least one platform.")
    binaries: dict[str, Binary] = {}
    for platform, value in binaries_raw.items():
        if not PLATFORM_RE.fullmatch(platform):
            raise _invalid(
                f"The manifest platform {shown(platform)} is not linux-<arch> with arch of [a-z0-9_] "
                f"(1 to {MAX_ARCH_LENGTH} characters)."
            )
        binaries[platform] = _binary(platform, value)

    protocol_version = None
    if "protocolVersion" in data:
        protocol_version = _int_field(
            "'protocolVersion'", data["protocolVersion"], minimum=1, maximum=MAX_PROTOCOL_VERSION
        )

    notes = None
    if "notes" in data:
        notes = data["notes"]
        if not isinstance(notes, str):
            raise _invalid(f"The manifest field 'notes' must be a string, not {_describe(notes)} (omit it instead).")
        if not _safe_text(notes):
            raise _invalid("The manifest field 'notes' contains a NUL character or a lone surrogate.")

    expires = None
    if "expires" in data:
        try:
            expires = parse_timestamp(data["expires"])
        except ValueError as exc:
            raise _invalid(f"The manifest field 'expires' {exc}.") from None

    return Manifest(
        product=product,
        version=version,
        sequence=sequence,
        protocol_version=protocol_version,
        binaries=binaries,
        notes=notes,
        expires=expires,
    )


def parse_manifest(payload: bytes) -> Manifest:
    """Parse and validate the manifest bytes. Raises ReleaseError (invalid_manifest or wrong_product)."""
    try:
        data = loads_strict(payload)
    except StrictJSONError as exc:
        raise _invalid(f"The manifest {exc}.") from None
    return manifest_from_dict(data)


def manifest_for(
    *,
    version: str,
    sequence: int,
    binaries: Mapping[str, bytes],
    protocol_version: int | None = None,
    notes: str | None = None,
    expires: datetime | None = None,
) -> Manifest:
    """A bcd manifest describing binaries held in memory (``{"linux-amd64": bytes}``), validated as any other."""
    body: dict[str, Any] = {
        "product": "bcd",
        "version": version,
        "sequence": sequence,
        "binaries": {
            platform: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for platform, data in binaries.items()
        },
    }
    if protocol_version is not None:
        body["protocolVersion"] = protocol_version
    if notes is not None:
        body["notes"] = notes
    if expires is not None:
        body["expires"] = format_timestamp(expires)
    return manifest_from_dict(body)


def manifest_to_dict(manifest: Manifest) -> dict[str, Any]:
    """The JSON shape of a manifest; optional fields that are None are left out."""
    data: dict[str, Any] = {
        "product": manifest.product,
        "version": manifest.version,
        "sequence": manifest.sequence,
        "binaries": {
            platform: {"sha256": binary.sha256, "size": binary.size}
            for platform, binary in sorted(manifest.binaries.items())
        },
    }
    if manifest.protocol_version is not None:
        data["protocolVersion"] = manifest.protocol_version
    if manifest.notes is not None:
        data["notes"] = manifest.notes
    if manifest.expires is not None:
        data["expires"] = format_timestamp(manifest.expires)
    return data


def manifest_to_bytes(manifest: Manifest) -> bytes:
    """UTF-8 JSON with sorted keys and no insignificant whitespace (for writing new manifests)."""
    return json.dumps(
        manifest_to_dict(manifest), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
