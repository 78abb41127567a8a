"""System checks of binary delivery: the offload mode and the store it needs (docs/operations.md#binary-delivery).

| id | what |
| --- | --- |
| rollout.E020 | ROLLOUT_DOWNLOADS_OFFLOAD is not none, accel or redirect |
| rollout.E021 | none or accel, but the default storage is not the file system (nginx and Django read MEDIA_ROOT) |
| rollout.E022 | redirect, but no ROLLOUT_S3_BUCKET, or the default storage is not django-storages' S3Storage |
| rollout.E023 | ROLLOUT_DOWNLOADS_PRESIGN_SECONDS is not an integer from 1 to 900 (15 minutes) |
| rollout.E024 | ROLLOUT_S3_BUCKET or ROLLOUT_S3_ENDPOINT_URL is set, but the mode is not redirect |
| rollout.E025 | ROLLOUT_S3_ENDPOINT_URL is not https:// (or http:// to a loopback host) |
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.files.storage import FileSystemStorage, default_storage

from rollout.checks import TAG, url_problem
from rollout.registry.storage import MAX_PRESIGN_SECONDS, Offload, is_object_storage

MODES = ", ".join(mode.value for mode in Offload)


@register(TAG)
def check_downloads_offload(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, "ROLLOUT_DOWNLOADS_OFFLOAD", Offload.NONE)
    try:
        mode = Offload(raw)
    except ValueError:
        return [
            Error(
                f"ROLLOUT_DOWNLOADS_OFFLOAD is {raw!r}: it must be one of {MODES}.",
                hint="none: Django serves downloads (local runs); accel: nginx serves them (the web tier); "
                "redirect: object storage does (presigned URLs).",
                id="rollout.E020",
            )
        ]
    messages: list[CheckMessage] = []
    bucket = getattr(settings, "ROLLOUT_S3_BUCKET", None)
    endpoint = getattr(settings, "ROLLOUT_S3_ENDPOINT_URL", None)
    if mode is Offload.REDIRECT:
        if not bucket or not is_object_storage(default_storage):
            messages.append(
                Error(
                    "ROLLOUT_DOWNLOADS_OFFLOAD=redirect needs the binaries in S3-compatible object storage: "
                    + ("set ROLLOUT_S3_BUCKET." if not bucket else "the default storage is not S3Storage."),
                    hint="Set ROLLOUT_S3_BUCKET (and ROLLOUT_S3_ENDPOINT_URL for a store other than AWS S3), "
                    "and leave STORAGES['default'] to the settings.",
                    id="rollout.E022",
                )
            )
        seconds = getattr(settings, "ROLLOUT_DOWNLOADS_PRESIGN_SECONDS", MAX_PRESIGN_SECONDS)
        if type(seconds) is not int or not 1 <= seconds <= MAX_PRESIGN_SECONDS:
            messages.append(
                Error(
                    f"ROLLOUT_DOWNLOADS_PRESIGN_SECONDS is {seconds!r}: a presigned URL lives from 1 to "
                    f"{MAX_PRESIGN_SECONDS} seconds (15 minutes).",
                    hint="Leave it unset (900) or set an integer from 1 to 900.",
                    id="rollout.E023",
                )
            )
        problem = url_problem(endpoint) if endpoint else None
        if problem:
            messages.append(
                Error(
                    f"ROLLOUT_S3_ENDPOINT_URL {endpoint!r} {problem}.",
                    hint="Agents fetch the presigned URLs from it: https://host[:port], or http:// on loopback.",
                    id="rollout.E025",
                )
            )
        return messages
    if not isinstance(default_storage, FileSystemStorage):
        messages.append(
            Error(
                f"ROLLOUT_DOWNLOADS_OFFLOAD={mode.value} serves binaries from MEDIA_ROOT, but the default storage "
                f"is {type(default_storage).__name__}.",
                hint="Use redirect mode for object storage, or the file system storage.",
                id="rollout.E021",
            )
        )
    if bucket or endpoint:
        messages.append(
            Error(
                f"ROLLOUT_S3_BUCKET or ROLLOUT_S3_ENDPOINT_URL is set, but ROLLOUT_DOWNLOADS_OFFLOAD is {mode.value}: "
                "binaries would be stored in MEDIA_ROOT, not in the bucket.",
                hint="Set ROLLOUT_DOWNLOADS_OFFLOAD=redirect, or unset the S3 variables.",
                id="rollout.E024",
            )
        )
    return messages
