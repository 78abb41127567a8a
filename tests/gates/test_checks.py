"""The gates' settings as system checks (rollout/checks.py: rollout.E030, rollout.E031)."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from rollout import checks


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("ROLLOUT_PROMETHEUS_URL", "prometheus:9090", "rollout.E030"),
        ("ROLLOUT_PROMETHEUS_URL", "ftp://prometheus/", "rollout.E030"),
        ("ROLLOUT_PROMETHEUS_URL", "http://prometheus:9090/?x=1", "rollout.E030"),
        ("ROLLOUT_PROMETHEUS_URL", "http://169.254.169.254/", "rollout.E030"),
        ("ROLLOUT_GATE_URL_ALLOW", ["https://status.example.com"], "rollout.E031"),
        ("ROLLOUT_GATE_URL_ALLOW", ["status.example.com/"], "rollout.E031"),
        ("ROLLOUT_GATE_URL_ALLOW", ["https://"], "rollout.E031"),
    ],
)
def test_bad_gate_settings_fail_the_check(setting, value, expected):
    with override_settings(**{setting: value}), pytest.raises(SystemCheckError, match=re.escape(expected)):
        call_command("check", "--tag", checks.TAG)


def test_good_gate_settings_pass():
    with override_settings(
        ROLLOUT_PROMETHEUS_URL="http://127.0.0.1:9090/prometheus",
        ROLLOUT_GATE_URL_ALLOW=["https://status.example.com/", "http://127.0.0.1:", "https://ci.example.com/health"],
    ):
        assert checks.check_gates() == []
