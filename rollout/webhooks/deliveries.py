"""Webhooks (docs/webhooks.md): subscriptions, and deliveries of rollout events, at least once.

The event's transaction writes one ``WebhookDelivery`` per subscribed webhook (``deliveries_create``,
called by ``events.event_record``) and asks, after the commit, for one ``rollout/webhook-deliver``
task each. The HTTP call happens only in that task (``delivery_claim`` -> transport.post_event ->
``delivery_record``), never in a tick or an API request, so a slow or dead receiver slows neither.

Retries: after a failed attempt the row is due again after ``retry_delay(attempts)`` (30 s, 1, 2,
4 ... min, then hourly; 31 attempts span 24 h). A retry due within the broker's visibility
timeout is published with that ETA; a later one is not published at all (dispatch refuses it) and
the periodic ``rollout/webhooks-due`` sweep publishes it once due. The sweep also recovers
deliveries whose message was lost or whose worker died mid-attempt (the claim's lease expires).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import InvalidInput, NotFound
from core.times import api_datetime
from fleet.interface import Actor, Tenant, audit_record
from rollout.dispatch import WEBHOOK_DELIVER_TASK, publish, publish_on_commit
from rollout.models import Rollout, RolloutEvent, Webhook, WebhookDelivery
from rollout.webhooks.transport import MAX_ATTEMPTS, DeliveryResult, UnsafeURL, check_url, retry_delay

log = structlog.get_logger("rollout")

SECRET_MIN = 16
SECRET_MAX = 200
#: A claimed attempt owns the row this long (timeout 10 s, DNS, recording): then the sweep may retry.
CLAIM_LEASE = timedelta(seconds=90)
#: The sweep leaves a due delivery this long to the message published for it.
SWEEP_GRACE = timedelta(seconds=60)
SWEEP_BATCH = 500


def allow_http() -> bool:
    return bool(getattr(settings, "ROLLOUT_WEBHOOKS_ALLOW_HTTP", False))


# --- subscriptions ------------------------------------------------------------------------------
def _events(events: object) -> list[str]:
    known = ", ".join(Webhook.EVENTS)
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise InvalidInput(f"events is a non-empty list of: {known}.", code="invalid_events")
    unknown = sorted({e for e in events if e not in Webhook.EVENTS})
    if unknown:
        raise InvalidInput(f"Unknown event(s) {', '.join(unknown)}; known: {known}.", code="invalid_events")
    return list(dict.fromkeys(events))


def _secret(secret: object) -> str:
    if secret is None:
        return secrets.token_urlsafe(32)
    if not isinstance(secret, str) or not SECRET_MIN <= len(secret) <= SECRET_MAX or not secret.isprintable():
        raise InvalidInput(
            f"secret is {SECRET_MIN} to {SECRET_MAX} printable characters (or leave it out to get one).",
            code="invalid_secret",
        )
    return secret


def webhook_create(
    *, tenant: Tenant, url: str, events: object, secret: object = None, actor: Actor | None = None
) -> Webhook:
    """Subscribe ``url`` to ``events``. The secret (given or generated) is on the returned row only."""
    try:
        check_url(url, allow_http=allow_http())
    except UnsafeURL as exc:
        raise InvalidInput(str(exc), code="invalid_url") from exc
    chosen = _events(events)
    plain = _secret(secret)
    with transaction.atomic():
        webhook = Webhook.objects.create(tenant=tenant, url=url, events=chosen, secret=plain, created_at=timezone.now())
        audit_record(
            tenant=tenant,
            actor=actor,
            action="webhook.create",
            object_type="webhook",
            object_id=webhook.pk,
            after={"url": url, "events": chosen},
        )
    return webhook


def webhook_delete(*, tenant: Tenant, webhook_id: UUID | str, actor: Actor | None = None) -> None:
    """Remove a subscription and its deliveries (pending ones are not sent)."""
    with transaction.atomic():
        webhook = Webhook.objects.select_for_update().filter(tenant=tenant, pk=webhook_id).first()
        if webhook is None:
            raise NotFound("No such webhook.", code="not_found")
        audit_record(
            tenant=tenant,
            actor=actor,
            action="webhook.delete",
            object_type="webhook",
            object_id=webhook.pk,
            before={"url": webhook.url, "events": webhook.events},
        )
        webhook.delete()


# --- deliveries -----------------------------------------------------------------------------
def deliveries_create(*, event: RolloutEvent, rollout: Rollout) -> int:
    """In the event's transaction: a pending delivery per subscribed webhook, each published after commit."""
    # jsonb containment: the tenant's webhooks whose events list holds this kind.
    webhooks = list(Webhook.objects.filter(tenant_id=rollout.tenant_id, events__contains=[event.kind]).only("id"))
    if not webhooks:
        return 0
    now = timezone.now()
    rows = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook_id=webhook.id, rollout_event=event, event=event.kind, created_at=now, next_attempt_at=now
        )
        for webhook in webhooks
    )
    for row in rows:
        publish_on_commit(WEBHOOK_DELIVER_TASK, args=[str(row.id)])
    return len(rows)


def body_bytes(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Claimed:
    """One attempt's inputs, read under the claim."""

    id: str
    event: str
    url: str
    secret: str
    body: bytes


def delivery_claim(
    *, delivery_id: UUID | str, now: datetime, render_rollout: Callable[[Rollout, datetime], dict[str, Any]]
) -> Claimed | None:
    """Take a due, pending delivery for one attempt (None: gone, done, not due, or claimed by another).

    The first claim builds and stores the body (the rollout as ``GET /rollouts/{id}/`` shows it
    then: ``render_rollout``, given by the task: the representation reads the controller's plan,
    and the controller records the events this module delivers), so every retry sends the same bytes under the same id.
    """
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .select_related("webhook", "webhook__tenant", "rollout_event")
            .filter(pk=delivery_id, status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if delivery is None:
            return None
        if not delivery.body:
            event = delivery.rollout_event
            rollout = Rollout.objects.select_related("release").prefetch_related("pools").get(pk=event.rollout_id)
            delivery.body = body_bytes(
                {
                    "id": str(delivery.id),
                    "event": delivery.event,
                    "at": api_datetime(event.at),
                    "tenant": delivery.webhook.tenant.slug,
                    "rollout": render_rollout(rollout, now),
                    "data": event.data,
                }
            )
        delivery.next_attempt_at = now + CLAIM_LEASE
        delivery.save(update_fields=["body", "next_attempt_at"])
    webhook = delivery.webhook
    return Claimed(
        id=str(delivery.id),
        event=delivery.event,
        url=webhook.url,
        secret=webhook.secret,
        body=delivery.body.encode("utf-8"),
    )


def delivery_record(*, delivery_id: UUID | str, result: DeliveryResult, now: datetime) -> str | None:
    """Record an attempt's outcome; schedule the next one. Returns the new status (None: the row is gone)."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .filter(pk=delivery_id, status=WebhookDelivery.Status.PENDING)
            .first()
        )
        if delivery is None:  # deleted with its webhook meanwhile, or recorded by a duplicate
            return None
        delivery.attempts += 1  # under the row lock
        attempts = delivery.attempts
        delivery.last_status_code = result.status_code
        delivery.last_error = (result.error or "")[:200]
        if result.ok:
            delivery.status = WebhookDelivery.Status.DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif attempts >= MAX_ATTEMPTS:
            delivery.status = WebhookDelivery.Status.FAILED
            delivery.next_attempt_at = None
        else:
            delivery.next_attempt_at = now + timedelta(seconds=retry_delay(attempts))
            # Beyond the visibility timeout publish() declines: the sweep publishes it when due.
            publish_on_commit(WEBHOOK_DELIVER_TASK, args=[str(delivery.pk)], eta=delivery.next_attempt_at)
        delivery.save(
            update_fields=[
                "attempts",
                "last_status_code",
                "last_error",
                "status",
                "delivered_at",
                "next_attempt_at",
            ]
        )
    log.info(
        "webhook.delivery",
        delivery=str(delivery_id),
        attempt=attempts,
        status=delivery.status,
        status_code=result.status_code,
        error=result.error,
    )
    return str(delivery.status)


def deliveries_due(*, now: datetime, limit: int = SWEEP_BATCH) -> Sequence[str]:
    """Pending deliveries whose time has come (and gone by the grace): publish a task for each."""
    ids = [
        str(pk)
        for pk in WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now - SWEEP_GRACE
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    ]
    for pk in ids:
        publish(WEBHOOK_DELIVER_TASK, args=[pk])
    return ids


def deliveries_for(*, tenant: Tenant, webhook_id: UUID | str) -> QuerySet[WebhookDelivery]:
    webhook = Webhook.objects.filter(tenant=tenant, pk=webhook_id).first()
    if webhook is None:
        raise NotFound("No such webhook.", code="not_found")
    return webhook.deliveries.order_by("-created_at")
