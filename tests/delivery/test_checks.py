"""A delivery configuration that cannot work is a system-check error (rollout/registry/delivery_checks.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from rollout.registry.delivery_checks import check_downloads_offload

FILES = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
S3 = {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {"bucket_name": "b", "region_name": "us-east-1"}}
STATIC = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}


def ids(*, storage: dict = FILES, **settings: Any) -> list[str]:
    values = {"ROLLOUT_S3_BUCKET": None, "ROLLOUT_S3_ENDPOINT_URL": None, **settings}
    with override_settings(STORAGES={"default": storage, "staticfiles": STATIC}, **values):
        return [message.id for message in check_downloads_offload()]


REDIRECT = {"ROLLOUT_DOWNLOADS_OFFLOAD": "redirect", "ROLLOUT_S3_BUCKET": "b", "storage": S3}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param({"ROLLOUT_DOWNLOADS_OFFLOAD": "none"}, [], id="none"),
        pytest.param({"ROLLOUT_DOWNLOADS_OFFLOAD": "accel"}, [], id="accel"),
        pytest.param(REDIRECT, [], id="redirect"),
        pytest.param({**REDIRECT, "ROLLOUT_S3_ENDPOINT_URL": "http://127.0.0.1:9000"}, [], id="loopback-endpoint"),
        pytest.param({"ROLLOUT_DOWNLOADS_OFFLOAD": "nginx"}, ["rollout.E020"], id="unknown-mode"),
        pytest.param({"ROLLOUT_DOWNLOADS_OFFLOAD": "accel", "storage": S3}, ["rollout.E021"], id="accel-on-s3"),
        pytest.param({"ROLLOUT_DOWNLOADS_OFFLOAD": "none", "storage": S3}, ["rollout.E021"], id="none-on-s3"),
        pytest.param({**REDIRECT, "ROLLOUT_S3_BUCKET": None}, ["rollout.E022"], id="no-bucket"),
        pytest.param({**REDIRECT, "storage": FILES}, ["rollout.E022"], id="redirect-on-files"),
        pytest.param({**REDIRECT, "ROLLOUT_DOWNLOADS_PRESIGN_SECONDS": 901}, ["rollout.E023"], id="over-15-minutes"),
        pytest.param({**REDIRECT, "ROLLOUT_DOWNLOADS_PRESIGN_SECONDS": "ten"}, ["rollout.E023"], id="not-a-number"),
        pytest.param({**REDIRECT, "ROLLOUT_DOWNLOADS_PRESIGN_SECONDS": 0}, ["rollout.E023"], id="zero-seconds"),
        pytest.param(
            {"ROLLOUT_DOWNLOADS_OFFLOAD": "accel", "ROLLOUT_S3_BUCKET": "b"}, ["rollout.E024"], id="bucket-but-accel"
        ),
        pytest.param(
            {**REDIRECT, "ROLLOUT_S3_ENDPOINT_URL": "http://minio.internal:9000"}, ["rollout.E025"], id="plain-http"
        ),
    ],
)
def test_delivery_configurations(settings, expected):
    assert ids(**settings) == expected


def test_manage_py_check_fails_on_an_inconsistent_configuration():
    with (
        override_settings(ROLLOUT_DOWNLOADS_OFFLOAD="redirect", ROLLOUT_S3_BUCKET=None),
        pytest.raises(SystemCheckError, match=r"rollout\.E022"),
    ):
        call_command("check")
