"""Webhooks end to end (docs/webhooks.md): subscriptions through the API, deliveries of rollout events
to real receivers on 127.0.0.1 by the delivery task, retries with the same id, SSRF refusals."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from fleet.models import AuditEntry
from rollout import tasks
from rollout.controller import tick as controller
from rollout.dispatch import max_delay
from rollout.models import Webhook, WebhookDelivery
from rollout.webhooks.deliveries import SWEEP_GRACE, deliveries_due
from rollout.webhooks.transport import MAX_ATTEMPTS, verify
from tests.factories import fleet
from tests.rollout.conftest import module_settings, releases  # noqa: F401  (shared fixtures)

ROLLOUT_KEYS = {
    "id",
    "version",
    "state",
    "poolIds",
    "waves",
    "currentWave",
    "maxFailureRatio",
    "soakSeconds",
    "upgradeTimeoutSeconds",
    "pausedReason",
    "createdAt",
    "completedAt",
}
SECRET = "s3cret-s3cret-s3cret"


@pytest.fixture
def allow_http(settings):
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    return settings


def _subscribe(api, url: str, events=("rollout.created", "rollout.paused"), **extra) -> dict:
    response = api.post("/api/compute/webhooks/", {"url": url, "events": list(events), **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _rollout(api, tenant) -> str:
    fleet(tenant, {"a": (4, "0.5")})
    response = api.post("/api/compute/rollouts/", {"version": "1.0.0"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


# --- subscriptions ---------------------------------------------------------------------------
def test_create_list_delete(api, other_api, tenant, allow_http):
    created = _subscribe(api, "https://hooks.example.com/rollout", secret=SECRET)
    assert set(created) == {"id", "url", "events", "secret", "createdAt"}
    assert created["secret"] == SECRET
    generated = _subscribe(api, "http://127.0.0.1:9/x", events=["rollout.completed"])
    assert len(generated["secret"]) >= 16

    listed = api.get("/api/compute/webhooks/").json()["results"]
    assert [w["id"] for w in listed] == [created["id"], generated["id"]]
    assert all(set(w) == {"id", "url", "events", "createdAt"} for w in listed)  # never the secret
    assert other_api.get("/api/compute/webhooks/").json()["results"] == []
    assert other_api.delete(f"/api/compute/webhooks/{created['id']}/").status_code == 404
    assert other_api.get(f"/api/compute/webhooks/{created['id']}/deliveries/").status_code == 404

    assert api.delete(f"/api/compute/webhooks/{created['id']}/").status_code == 204
    assert api.delete(f"/api/compute/webhooks/{created['id']}/").status_code == 404
    assert api.delete("/api/compute/webhooks/not-a-uuid/").status_code == 404
    assert [w["id"] for w in api.get("/api/compute/webhooks/").json()["results"]] == [generated["id"]]

    audit = AuditEntry.objects.filter(tenant=tenant, action__startswith="webhook.").order_by("seq")
    assert [(e.action, e.actor_via, e.object_id) for e in audit] == [
        ("webhook.create", "api", created["id"]),
        ("webhook.create", "api", generated["id"]),
        ("webhook.delete", "api", created["id"]),
    ]
    assert all(SECRET not in json.dumps([e.before, e.after]) for e in audit)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "http://hooks.example.com/", "events": ["rollout.created"]}, "invalid_url"),  # http without the flag
        ({"url": "https://169.254.169.254/latest/meta-data", "events": ["rollout.created"]}, "invalid_url"),
        ({"url": "https://[fe80::1]/", "events": ["rollout.created"]}, "invalid_url"),
        ({"url": "https://100.100.100.200/", "events": ["rollout.created"]}, "invalid_url"),
        ({"url": "https://127.0.0.1/", "events": ["rollout.created"]}, "invalid_url"),  # private without the flag
        ({"url": "ftp://hooks.example.com/", "events": ["rollout.created"]}, "invalid_url"),
        ({"url": "https://hooks.example.com/", "events": []}, "invalid_events"),
        ({"url": "https://hooks.example.com/", "events": ["rollout.exploded"]}, "invalid_events"),
        ({"url": "https://hooks.example.com/", "events": ["rollout.created"], "secret": "short"}, "invalid_secret"),
        ({"url": "https://hooks.example.com/", "events": "rollout.created"}, "invalid_input"),
        ({"url": 5, "events": ["rollout.created"]}, "invalid_input"),
        ({"url": "https://hooks.example.com/", "events": ["rollout.created"], "extra": 1}, "invalid_input"),
    ],
)
def test_bad_subscriptions_are_refused_and_write_nothing(api, tenant, body, code):
    audited = AuditEntry.objects.count()
    response = api.post("/api/compute/webhooks/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert not Webhook.objects.exists()
    assert AuditEntry.objects.count() == audited


def test_link_local_is_refused_even_with_http_allowed(api, allow_http):
    for url in ("http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://0.0.0.0:80/"):
        response = api.post("/api/compute/webhooks/", {"url": url, "events": ["rollout.created"]}, format="json")
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_url"


# --- deliveries ----------------------------------------------------------------------------------
@pytest.mark.usefixtures("releases")
def test_failed_delivery_is_retried_with_the_same_id_and_a_valid_signature(api, tenant, serve, allow_http, monkeypatch):
    receiver = serve(status=500)
    hook = _subscribe(api, receiver.url(), secret=SECRET)
    rollout_id = _rollout(api, tenant)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.status, delivery.attempts) == ("rollout.created", "pending", 0)
    assert receiver.requests == []  # nothing is sent from the API call

    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert tasks.webhook_deliver(str(delivery.id)) == "pending"
        assert tasks.webhook_deliver(str(delivery.id)) is None  # not due yet: a duplicate message does nothing
        shown = api.get(f"/api/compute/rollouts/{rollout_id}/").json()  # what the API said when the body was built
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_status_code, delivery.last_error) == (1, 500, "HTTP 500")
    assert timedelta(0) < delivery.next_attempt_at - start <= timedelta(minutes=1)  # first retry within a minute

    receiver.status = 200
    with time_machine.travel(delivery.next_attempt_at, tick=False):
        assert tasks.webhook_deliver(str(delivery.id)) == "delivered"
        assert tasks.webhook_deliver(str(delivery.id)) is None  # delivered: never again

    first, second = receiver.requests
    assert first.body == second.body
    for request in (first, second):
        assert request.headers["X-Rollout-Delivery"] == str(delivery.id)
        assert request.headers["X-Rollout-Event"] == "rollout.created"
        assert request.headers["Content-Type"] == "application/json"
        assert verify(SECRET, request.body, request.headers["X-Rollout-Signature"])
    body = json.loads(first.body)
    assert set(body) == {"id", "event", "at", "tenant", "rollout", "data"}
    assert (body["id"], body["event"], body["tenant"]) == (str(delivery.id), "rollout.created", "acme")
    assert set(body["rollout"]) >= ROLLOUT_KEYS
    assert body["rollout"] == shown  # the webhook carries the API's representation, one rendering for both
    assert first.body == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()  # compact JSON
    assert body["data"]["nodes"] == 4

    rows = api.get(f"/api/compute/webhooks/{hook['id']}/deliveries/").json()["results"]
    assert rows == [
        {
            "id": str(delivery.id),
            "event": "rollout.created",
            "status": "delivered",
            "attempts": 2,
            "lastStatusCode": 200,
            "lastError": None,
            "createdAt": rows[0]["createdAt"],
            "deliveredAt": rows[0]["deliveredAt"],
        }
    ]
    monkeypatch.setenv("METRICS_PUBLIC", "1")  # /metrics is closed unless a token or this is set
    metrics = api.get("/metrics").content.decode()
    assert 'rollout_webhook_deliveries{status="delivered",tenant="acme"} 1.0' in metrics


@pytest.mark.usefixtures("releases")
def test_retries_go_on_for_a_day_then_fail(api, tenant, serve, allow_http, closed_port):
    _subscribe(api, f"http://127.0.0.1:{closed_port}/hook")
    _rollout(api, tenant)
    delivery = WebhookDelivery.objects.get()
    start = now = timezone.now()
    late = []
    for _ in range(MAX_ATTEMPTS):
        with time_machine.travel(now, tick=False):
            status = tasks.webhook_deliver(str(delivery.id))
        delivery.refresh_from_db()
        assert delivery.last_error.startswith("connect")
        if status == "failed":
            break
        if delivery.next_attempt_at - now > max_delay():
            late.append(delivery.next_attempt_at)  # not published: the sweep's job
        now = delivery.next_attempt_at
    assert (delivery.status, delivery.attempts) == ("failed", MAX_ATTEMPTS)
    assert now - start >= timedelta(hours=24)
    assert late  # hourly retries are beyond the visibility timeout...
    with time_machine.travel(late[0] - timedelta(seconds=1), tick=False):
        assert str(delivery.id) not in deliveries_due(now=timezone.now())
    # ...and a pending delivery whose time has come is published by the sweep (eager here: it runs).


@pytest.mark.usefixtures("releases")
def test_the_sweep_delivers_what_no_message_was_published_for(api, tenant, serve, allow_http, settings):
    receiver = serve(status=200)
    _subscribe(api, receiver.url())
    _rollout(api, tenant)  # on_commit never fires inside the test's transaction: no message was published
    delivery = WebhookDelivery.objects.get()
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert deliveries_due(now=timezone.now()) == []  # the published message has its grace
    with time_machine.travel(timezone.now() + SWEEP_GRACE + timedelta(seconds=1), tick=False):
        assert tasks.webhooks_due() == 1
    delivery.refresh_from_db()
    assert delivery.status == "delivered"
    assert len(receiver.requests) == 1


@pytest.mark.usefixtures("releases")
def test_a_dead_receiver_never_slows_the_api_or_the_tick(api, tenant, serve, allow_http):
    receiver = serve(hang=True)  # accepts, reads, never answers
    _subscribe(api, receiver.url(), events=["rollout.created", "rollout.paused", "rollout.wave"])
    started = time.monotonic()
    rollout_id = _rollout(api, tenant)
    controller.rollout_tick(rollout_id=rollout_id)
    assert api.post(f"/api/compute/rollouts/{rollout_id}/pause/").status_code == 200
    assert time.monotonic() - started < 10  # under one delivery timeout (10 s): no call waited for the receiver
    assert receiver.requests == []  # the POSTs happen only in the delivery task
    assert WebhookDelivery.objects.filter(status="pending").count() == 2


@pytest.mark.usefixtures("releases")
def test_ssrf_is_refused_at_delivery(api, tenant, serve, settings, allow_http):
    receiver = serve(status=200)
    _subscribe(api, receiver.url())
    # A row that could never be created through the API (metadata address), as if written before a fix.
    Webhook.objects.create(
        tenant=tenant,
        url="http://169.254.169.254/latest",
        events=["rollout.created"],
        secret=SECRET,
        created_at=timezone.now(),
    )
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = False  # and loopback is refused once the flag is off
    _rollout(api, tenant)
    for delivery in WebhookDelivery.objects.all():
        assert tasks.webhook_deliver(str(delivery.id)) == "pending"
        delivery.refresh_from_db()
        assert delivery.last_error.startswith("invalid_url")
        assert delivery.last_status_code is None
    assert receiver.requests == []
