"""Joins and leaves answered by the async front (fleet/watch/front.py) over the real web tier: the same answers as
Django's view (AgentSessionView, run here in-process through the whole middleware stack), the same rows written, and
the same plug-in notice after a join (a rollout's in-flight node settles at once). What the front does not take
(an unknown or malformed token, a body, an Accept without JSON) is Django's answer."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from fleet.models import NodeSession
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade
from tests.watch.conftest import SESSION, start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def leave_over_http(agent, **headers: str) -> httpx.Response:
    return httpx.delete(agent.url + SESSION, headers={"Authorization": f"Bearer {agent.token}", **headers}, timeout=30)


def leave_in_django(agent, **headers: str):
    return Client().delete(SESSION, headers={"Authorization": f"Bearer {agent.token}", **headers})


def test_a_leave_is_django_s_answer_and_idempotent(server, agents):
    front_agent, django_agent = agents(2)
    front, django = leave_over_http(front_agent), leave_in_django(django_agent)
    assert front.status_code == django.status_code == 204
    assert front.content == django.content == b""
    for header in ("Vary", "Allow", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy", "Content-Type"):
        assert front.headers.get(header) == django.headers.get(header), header
    left_at = NodeSession.objects.get(node=front_agent.node).left_at
    assert left_at is not None
    assert leave_over_http(front_agent).status_code == 204  # again: nothing changes
    assert NodeSession.objects.get(node=front_agent.node).left_at == left_at


def test_a_join_after_a_leave_is_django_s_answer(server, agents):
    front_agent, django_agent = agents(2)
    leave_over_http(front_agent)
    leave_in_django(django_agent)
    front = front_agent.session()
    django = Client().post(
        SESSION,
        django_agent.body(),
        content_type="application/json",
        headers={"Authorization": f"Bearer {django_agent.token}"},
    )
    assert front.status_code == django.status_code == 200
    assert front.json() == django.json()  # two nodes of one pool with the same spec: the same answer
    for agent in (front_agent, django_agent):
        session = NodeSession.objects.get(node=agent.node)
        assert session.left_at is None
        assert session.daemon_version == "0.9.0"


def test_a_join_through_the_front_settles_the_node_s_upgrade_at_once(server, agents, releases):
    (agent,) = agents(1)
    rollout = start(agent)
    rollout_tick(rollout_id=rollout.id)
    upgrade = NodeUpgrade.objects.get(rollout=rollout, node=agent.node)
    assert upgrade.state == "in_flight"
    assert agent.session().json()["spec"]["daemon"]["version"] == "1.0.0"
    assert leave_over_http(agent).status_code == 204
    agent.version = "1.0.0"  # restarted on the new release
    assert agent.session().status_code == 200
    upgrade.refresh_from_db()
    assert upgrade.state == "succeeded"  # the join's notice ran (fleet.plugins.node_session_reported)


def test_what_the_front_does_not_take_on_a_leave_is_django_s_answer(server, agents):
    (agent,) = agents(1)
    unknown = httpx.delete(server.url + SESSION, headers={"Authorization": "Bearer at_unknown"})
    assert unknown.status_code == 401
    assert unknown.json()["code"] == "authentication_failed"
    malformed = httpx.delete(server.url + SESSION, headers={"Authorization": "Basic eDp5"})
    assert malformed.status_code == 401
    not_json = leave_over_http(agent, Accept="text/html")
    assert not_json.status_code == leave_in_django(agent, Accept="text/html").status_code == 406
    assert NodeSession.objects.get(node=agent.node).left_at is None  # none of them left
    with_body = httpx.request(
        "DELETE", agent.url + SESSION, content=b"{}", headers={"Authorization": f"Bearer {agent.token}"}
    )
    assert with_body.status_code == 204  # Django's view reads no body
    assert NodeSession.objects.get(node=agent.node).left_at is not None


def test_a_host_that_allowed_hosts_refuses_is_django_s_400_and_changes_nothing(server, agents):
    """As Django's CommonMiddleware would (request.get_host()): the front takes only a Host Django takes."""
    (agent,) = agents(1)
    session = NodeSession.objects.get(node=agent.node)
    forged = {"Authorization": f"Bearer {agent.token}", "Host": "evil.example"}
    joined = httpx.post(agent.url + SESSION, json=agent.body(daemonVersion="1.0.0"), headers=forged, timeout=30)
    left = httpx.delete(agent.url + SESSION, headers=forged, timeout=30)
    assert (joined.status_code, left.status_code) == (400, 400)
    assert Client().post(SESSION, agent.body(), content_type="application/json", headers=forged).status_code == 400
    after = NodeSession.objects.get(node=agent.node)
    assert (after.pk, after.daemon_version, after.left_at, after.last_seen_at) == (
        session.pk, "0.9.0", None, session.last_seen_at,
    )  # fmt: skip
    assert agent.session().status_code == 200  # its own Host: answered by the front as ever
