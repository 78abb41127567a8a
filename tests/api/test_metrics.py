"""Prometheus /metrics: state gauges from the database, the tick histogram, the optional bearer token."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery.signals import worker_process_shutdown
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from fleet.services.workflows import workflow_start
from rollout.controller.tick import rollout_tick
from rollout.rollouts.actions import rollout_pause
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet, manifest, release_stored, rollout_settings

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def module_settings(settings, monkeypatch, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    monkeypatch.delenv("METRICS_TOKEN", raising=False)
    monkeypatch.setenv("METRICS_PUBLIC", "1")  # the gauges' tests scrape without a token
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def scrape(client, **headers) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of one scrape (parsed by prometheus_client)."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[name][tuple(sorted(labels.items()))]


def test_gauges_show_upgrades_rollouts_and_budgets_after_a_tick(client, tenant, other_tenant):
    nodes = fleet(tenant, {"gpu": (20, "0.1"), "cpu": (4, "0.5")})
    gpu = nodes["gpu"][0].pool
    release_stored(manifest("0.9.0", 1))
    release_stored(manifest("1.0.0", 2))
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", pool_ids=[str(gpu.id)], waves=[100]))
    workflow_start(tenant=tenant, node_id=nodes["cpu"][0].id, kind="remediation")
    ticks_before = scrape(client)["rollout_tick_seconds_count"][()]

    rollout_tick(rollout_id=rollout.id)

    samples = scrape(client)
    assert samples["rollout_tick_seconds_count"][()] == ticks_before + 1
    assert value(samples, "rollout_node_upgrades", tenant="acme", state="in_flight") == 2  # ceil(0.1 x 20)
    assert value(samples, "rollout_node_upgrades", tenant="acme", state="pending") == 18
    assert value(samples, "rollout_node_upgrades", tenant="acme", state="succeeded") == 0
    assert value(samples, "rollout_node_upgrades", tenant="globex", state="in_flight") == 0
    assert value(samples, "rollout_active_rollouts", tenant="acme", state="active") == 1
    assert value(samples, "rollout_active_rollouts", tenant="acme", state="paused") == 0
    gpu_labels = {"tenant": "acme", "pool_id": str(gpu.id), "pool": "gpu"}
    assert value(samples, "fleet_pool_disruption_allowed", **gpu_labels) == 2
    assert value(samples, "fleet_pool_disrupted", **gpu_labels) == 2
    assert value(samples, "fleet_pool_nodes", **gpu_labels) == 20
    cpu_labels = {"tenant": "acme", "pool_id": str(nodes["cpu"][0].pool_id), "pool": "cpu"}
    assert value(samples, "fleet_pool_disruption_allowed", **cpu_labels) == 2  # ceil(0.5 x 4)
    assert value(samples, "fleet_pool_disrupted", **cpu_labels) == 1  # the workflow

    rollout_pause(rollout_id=rollout.id)
    samples = scrape(client)
    assert value(samples, "rollout_active_rollouts", tenant="acme", state="active") == 0
    assert value(samples, "rollout_active_rollouts", tenant="acme", state="paused") == 1


def test_a_scrape_costs_the_same_queries_whatever_the_fleet(client, tenant, other_tenant):
    fleet(tenant, {"a": (3, "0.1")})
    with CaptureQueriesContext(connection) as small:
        scrape(client)
    fleet(tenant, {"b": (50, "0.1"), "c": (10, "0.2")})
    fleet(other_tenant, {"d": (30, "0.1")})
    with CaptureQueriesContext(connection) as large:
        samples = scrape(client)
    assert len(large) == len(small) <= 10  # rollouts 3, webhook deliveries 2, pools 3, fleet pulse 1
    assert len(samples["fleet_pool_nodes"]) == 4


def test_openmetrics_when_asked_for(client):
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_only_get_and_head(client):
    assert client.post("/metrics").status_code == 405
    assert client.head("/metrics").status_code == 200


@pytest.mark.parametrize("public", [None, "", "0", "false"])
def test_metrics_are_disabled_without_a_token_unless_made_public(client, monkeypatch, public):
    if public is None:
        monkeypatch.delenv("METRICS_PUBLIC")
    else:
        monkeypatch.setenv("METRICS_PUBLIC", public)
    for response in (client.get("/metrics"), client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything")):
        assert response.status_code == 403
        assert response.json()["code"] == "metrics_disabled"
        assert b"acme" not in response.content


def test_a_token_wins_over_metrics_public(client, monkeypatch):
    monkeypatch.setenv("METRICS_TOKEN", "s3cret-token")
    assert client.get("/metrics").status_code == 401  # METRICS_PUBLIC=1 does not open a protected endpoint


def test_metrics_token_when_set(client, monkeypatch):
    monkeypatch.delenv("METRICS_PUBLIC")
    monkeypatch.setenv("METRICS_TOKEN", "s3cret-token")
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing.json()["code"] == "not_authenticated"
    assert missing["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "authentication_failed"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-token").status_code == 401
    assert "rollout_tick_seconds_count" in scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")


def test_ticks_observed_in_other_processes_are_summed_in_multiprocess_mode(client, tenant, tmp_path, monkeypatch):
    """What a Celery worker does: observe in its own process; the web process reads the shared directory."""
    code = (
        "import sys; from rollout.metrics import TICK_SECONDS\n"
        "for seconds in sys.argv[1:]: TICK_SECONDS.observe(float(seconds))\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "project.settings"}
    for observations in (["0.02", "0.3"], ["7"]):  # two worker processes
        subprocess.run([sys.executable, "-c", code, *observations], cwd=ROOT, env=env, check=True, timeout=60)
    files = sorted(path.name for path in tmp_path.iterdir())
    assert len(files) == 2
    assert all(name.startswith("histogram_") and name.count("_") == 1 for name in files)  # histogram_<pid>.db

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scrape(client)
    assert samples["rollout_tick_seconds_count"][()] == 3
    assert samples["rollout_tick_seconds_sum"][()] == pytest.approx(7.32)
    assert samples["rollout_tick_seconds_bucket"][(("le", "0.5"),)] == 2
    assert value(samples, "rollout_active_rollouts", tenant="acme", state="active") == 0  # the gauges too


@pytest.mark.parametrize("hook", ["gunicorn child_exit", "celery worker_process_shutdown"])
def test_a_dead_process_is_marked_dead_in_multiprocess_mode(hook, tmp_path, monkeypatch):
    """gunicorn.conf.py and project/celery.py call prometheus-client's mark_process_dead (its live gauges go)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    dead, alive = 4242, 4343
    for pid in (dead, alive):
        (tmp_path / f"gauge_livesum_{pid}.db").write_bytes(b"")
    if hook == "gunicorn child_exit":
        runpy.run_path(str(ROOT / "gunicorn.conf.py"))["child_exit"](None, SimpleNamespace(pid=dead))
    else:
        worker_process_shutdown.send(sender=None, pid=dead, exitcode=0)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"gauge_livesum_{alive}.db"]
