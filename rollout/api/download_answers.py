"""What a binary's download answers carry, and the answer the web tier's async front gives a download itself.

The view (rollout/api/views/downloads.py) decides every download it sees; with nginx moving the bytes
(``accel``), a ``GET`` or ``HEAD`` without preconditions of a binary the process served before is answered
the same by the async front (``download_quick_answer``, registered with ``fleet.plugins.register_quick_answers``):
no Django middleware, no thread, no statement. A stored binary's facts never change, and its file is checked
with a stat each time (``release_binary_served_kept``). docs/architecture.md#watch measured why.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from django.urls import Resolver404, resolve, reverse

from fleet.interface import QuickAnswer
from rollout.registry import storage
from rollout.registry.binaries import ServedBinary, release_binaries_kept, release_binary_served_kept

DOWNLOAD_URL_NAME = "release-download"  # rollout/api/urls.py
# The preconditions the view answers itself (get_conditional_response); If-Range is nginx's, with the bytes.
PRECONDITIONS = ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since")


def representation_headers(binary: ServedBinary) -> dict[str, str]:
    """What every 200/206/304 of a binary carries, on every path."""
    return {
        "Content-Type": storage.CONTENT_TYPE,
        "ETag": f'"{binary.sha256}"',
        "X-Checksum-Sha256": binary.sha256,
        "Cache-Control": storage.IMMUTABLE,
        "Accept-Ranges": "bytes",
        "Content-Disposition": storage.attachment(binary.version, binary.platform),
    }


def accel_headers(binary: ServedBinary) -> dict[str, str]:
    """The answer that hands a binary to nginx (``accel``): its headers, and nginx's internal location."""
    headers = representation_headers(binary)
    del headers["Accept-Ranges"]  # nginx keeps the application's and adds its own: one is enough
    headers["X-Accel-Redirect"] = storage.accel_location(binary.storage_name)
    return headers


def download_quick_answer(method: str, path: str, headers: Mapping[str, str]) -> QuickAnswer | None:
    """The async front's answer to a download (``fleet.plugins.register_quick_answers``), None: the view's.

    With nginx moving the bytes (``accel``), a ``GET`` or ``HEAD`` without preconditions of a binary this
    process served before gets the answer the view would give it, from what the process kept
    (``release_binary_served_kept``): every node of a rollout downloads the same few binaries."""
    # Nothing kept yet: the view serves this one. Before the view's first download the URLconf may not be loaded,
    # and loading it (below) would hold the event loop for a moment.
    if not release_binaries_kept() or storage.offload() is not storage.Offload.ACCEL:
        return None
    if any(name in headers for name in PRECONDITIONS):
        return None
    target = _download_target(path) if path.startswith(_downloads_prefix()) else None
    if target is None:
        return None
    binary = release_binary_served_kept(version=target[0], platform=target[1])
    if binary is None:
        return None
    return QuickAnswer(status=200, headers=tuple(accel_headers(binary).items()))


@functools.lru_cache(maxsize=1024)  # a rollout's nodes ask for a few paths; any other one costs a resolve
def _download_target(path: str) -> tuple[str, str] | None:
    """The version and platform of a download's path (the URLconf's route), None for any other path."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    if match.url_name != DOWNLOAD_URL_NAME:
        return None
    return match.kwargs["version"], match.kwargs["platform"]


@functools.cache
def _downloads_prefix() -> str:
    """Where the downloads' paths start (the URLconf's, read once): any other path is not one."""
    sample = reverse(DOWNLOAD_URL_NAME, kwargs={"version": "0", "platform": "linux-x"})
    return sample[: sample.index("/bcd/")]
