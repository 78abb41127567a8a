"""The console's words and numbers (issue 51): one date-time format with its zone, sizes in KiB/MiB, durations as
a person says them, ratios in percent, events as sentences with waves from 1, gate results beside the progress,
labels as chips, the node list's filters (label selector, online, version) and its last-seen column, and an
approve page that does not say it is done before the click."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from fleet.models import Node, NodeSession, Pool
from rollout.admin.display import duration_text, size_text, when
from rollout.admin.event_words import event_sentence
from rollout.controller.tick import rollout_tick
from rollout.models import Rollout, RolloutGate
from tests.admin.conftest import make_rollout
from tests.admin.test_create import form_data

pytestmark = pytest.mark.django_db


def test_one_date_time_format_with_minutes_and_its_zone():
    assert when(datetime(2026, 12, 7, 23, 0, tzinfo=UTC)) == "2026-12-07 23:00 UTC"
    assert when(None) == "-"


@pytest.mark.parametrize(
    ("size", "shown"),
    [(200000, "195.3 KiB"), (1023, "1023 bytes"), (5 * 1024 * 1024, "5.0 MiB"), (None, "-")],
)
def test_sizes_read_in_kib_and_mib(size, shown):
    assert size_text(size) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(605015, "7 days"), (3900, "1 h 5 min"), (90000, "1 day 1 h"), (172790, "2 days"), (60, "1 min"), (0, "0 s")],
)
def test_durations_read_as_a_person_says_them(seconds, shown):
    assert duration_text(seconds) == shown


def test_events_read_as_sentences_waves_from_1_pools_by_name():
    pools = {"p-1": "gpu-a"}
    assert event_sentence("rollout.wave", {"wave": 1, "percent": 10.0, "total": 3}, pools) == (
        "Wave 2 started: 3 nodes, up to 10 %."
    )
    created = event_sentence("rollout.created", {"nodes": 4, "waves": [1, 3], "poolIds": ["p-1"]}, pools)
    assert created == "Created for 4 nodes in 2 waves (1, 3 nodes), pools gpu-a."
    paused = {"pausedReason": "failure_ratio", "wave": 1, "failed": 2, "succeeded": 3, "maxFailureRatio": 0.1}
    assert event_sentence("rollout.paused", paused, pools) == (
        "Paused: in wave 2, 2 failed and 3 succeeded, over the 10 % allowed."
    )
    # A kind the console does not know still reads, key by key (never a 500).
    assert event_sentence("rollout.future", {"b": 1, "a": "x"}, pools) == "a: x; b: 1"


def test_the_rollout_page_shows_sentences_gates_beside_the_progress_and_waves_from_1(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (10, "0.5")}, waves=[50, 100], soak_seconds=605015)
    rollout_tick(rollout_id=rollout.id)
    now = timezone.now()
    RolloutGate.objects.create(
        rollout=rollout,
        position=0,
        name="errors",
        kind="prometheus",
        query="errors",
        maximum=1,
        state="fail",
        at=now,
        due_at=now,
    )
    page = root.get(f"/admin/rollout/rollout/{rollout.pk}/change/").content.decode()
    assert "Created for 10 nodes in 2 waves (5, 5 nodes), pools gpu-a." in page
    assert '<div class="readonly">7 days (605015 s)</div>' in page  # the soak, in words
    assert '"poolIds"' not in page
    assert 'id="rollout-gate-summary"' in page
    assert "errors: fail" in page
    listing = root.get("/admin/rollout/rollout/").content.decode()
    assert "errors: fail" in listing  # beside the list's progress too
    assert "UTC" in listing


def test_the_plan_preview_reads_the_failure_ratio_in_percent(root, tenant, releases):
    make_rollout(tenant, {"a": (4, "1")})
    Rollout.objects.all().delete()
    response = root.post(
        "/admin/rollout/rollout/add/", {**form_data(tenant, list(Pool.objects.all())), "_preview": "1"}
    )
    page = response.content.decode()
    assert '<div class="readonly">10 %</div>' in page
    assert '<div class="readonly">0.1</div>' not in page
    assert '<div class="readonly">1 min</div>' in page  # the soak


def test_the_approve_page_does_not_say_it_is_done_before_the_click(root, tenant, releases):
    from fleet.services.iam import tenant_set_rollout_approvals

    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    rollout = make_rollout(tenant, {"a": (2, "1")})
    page = root.get(f"/admin/rollout/rollout/{rollout.pk}/approve/").content.decode()
    assert "is recorded" not in page
    assert "Approving records your approval" in page


@pytest.fixture
def labelled(tenant):
    from tests.factories import fleet

    nodes = fleet(tenant, {"gpu-a": (4, "1")})["gpu-a"]
    Node.objects.filter(pk=nodes[0].pk).update(labels={"ring": "canary", "zone": "eu-1"})
    Node.objects.filter(pk=nodes[1].pk).update(labels={"ring": "main", "zone": "eu-1"})
    NodeSession.objects.filter(node=nodes[2]).update(left_at=timezone.now(), daemon_version="0.8.0")
    return nodes


def names(page: str, nodes) -> set[str]:
    return {node.name for node in nodes if f">{node.name}<" in page}


def test_the_node_list_shows_labels_as_chips_and_when_each_node_was_last_seen(root, labelled):
    page = root.get("/admin/fleet/node/").content.decode()
    assert '<span class="console-chip"><b>ring</b>=canary</span>' in page
    assert '{"ring"' not in page
    assert "Last seen" in page
    assert page.count("console-dot console-dot-on") == 3  # the node whose agent left is offline


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("selector=ring%3Dcanary", {0}),
        ("selector=zone%3Deu-1%2Cring+notin+%28canary%29", {1}),
        ("online=no", {2}),
        ("online=yes", {0, 1, 3}),
        ("version=0.8.0", {2}),
    ],
)
def test_the_node_list_filters_by_label_selector_online_and_version(root, labelled, query, expected):
    response = root.get(f"/admin/fleet/node/?{query}")
    assert response.status_code == 200
    assert names(response.content.decode(), labelled) == {labelled[i].name for i in expected}


def test_a_selector_that_does_not_parse_lists_no_node_and_says_why(root, labelled):
    response = root.get("/admin/fleet/node/?selector=ring%3D%3D%3D")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Label selector: at character 6: found &#x27;=&#x27;, expected a label value. No node is listed." in page
    assert names(page, labelled) == set()


def test_the_front_page_shows_versions_per_pool_rollouts_in_progress_and_the_controller(root, tenant, releases):
    rollout = make_rollout(tenant, {"gpu-a": (4, "0.5")}, waves=[50, 100])
    NodeSession.objects.filter(node__name="gpu-a-00000").update(daemon_version="0.8.0")
    finished = make_rollout(tenant, {"gpu-b": (2, "1")})
    from rollout.rollouts.actions import rollout_abort

    rollout_abort(rollout_id=finished.id)
    page = root.get("/admin/").content.decode()
    assert "Daemon versions per pool" in page
    assert "<b>0.9.0</b> &times; 3" in page
    assert "<b>0.8.0</b> &times; 1" in page
    assert f'href="/admin/rollout/rollout/{rollout.pk}/change/"' in page  # in progress
    assert f'href="/admin/rollout/rollout/{finished.pk}/change/"' not in page  # over
    assert "Not running: the last tick was never" in page  # no controller in this test
