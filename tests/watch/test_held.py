"""Held session answers over a real web tier (gunicorn + uvicorn, project.asgi) on PostgreSQL (docs/fleet.md#watch):
released within a second of the commit by every kind of change, at ``wait`` without one, by the resync once a lost
subscription is restored; the node stays online while held; no database connection and no thread per held request."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from demo.processes import wait_until
from fleet.models import Node, NodeSession
from fleet.services.commands import command_enqueue
from fleet.services.nodes import online_node_q
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade
from rollout.rollouts.actions import rollout_abort
from tests.watch.conftest import (
    PING_SECONDS,
    RECONNECT_SECONDS,
    SESSION,
    THREADS,
    bulk_agents,
    database_url,
    listener_pids,
    start,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

WAIT = 10  # longer than any wake may take: an answer before it was woken


@contextmanager
def committed():
    """A change in one transaction; yields a list that receives the monotonic time just before COMMIT
    (so an answer's latency measured from it is an upper bound)."""
    before: list[float] = []
    with transaction.atomic():
        yield before
        before.append(time.monotonic())


def released(held, since: list[float]) -> tuple[dict, float]:
    """The held answer and its latency from the commit that released it."""
    response, arrived = held.result(timeout=WAIT + 20)
    assert response.status_code == 200, response.text
    print(f"released {arrived - since[0]:.3f} s after the commit")  # shown with -s: the measured latency
    return response.json(), arrived - since[0]


def test_a_tick_that_starts_the_node_releases_its_held_answer_within_a_second(server, agents, releases):
    (agent,) = agents(1)
    seen = agent.session().json()["specRevision"]
    held = agent.watch(seen, WAIT)
    server.wait_held(1)
    rollout = start(agent)
    with committed() as since:
        result = rollout_tick(rollout_id=rollout.id)
    answer, latency = released(held, since)
    assert result is not None
    assert answer["spec"]["daemon"]["version"] == "1.0.0"
    assert answer["specRevision"] != seen
    assert latency < 1.0, f"answered {latency:.3f} s after the commit"


def test_a_send_back_at_a_real_timeout_releases_the_held_answer(server, agents, releases):
    (agent,) = agents(1)
    rollout = start(agent, upgrade_timeout_seconds=1)
    rollout_tick(rollout_id=rollout.id)
    answer = agent.session().json()
    assert answer["spec"]["daemon"]["version"] == "1.0.0"
    held = agent.watch(answer["specRevision"], WAIT)  # the agent "restarts" and never comes back on 1.0.0
    server.wait_held(1)
    upgrade = NodeUpgrade.objects.get(rollout=rollout)
    wait_until(lambda: timezone.now() > upgrade.deadline, timeout=5, what="the deadline")
    since: list[float] = []
    give_up = time.monotonic() + 15
    while not since:  # a tick fails the overdue node once the server has heard the fleet long enough
        with committed() as attempt:
            rollout_tick(rollout_id=rollout.id)
            if NodeUpgrade.objects.get(pk=upgrade.pk).state == "failed":
                since = attempt
        assert time.monotonic() < give_up, "the node was never sent back"
    answer, latency = released(held, since)
    assert answer["spec"]["daemon"]["version"] == "0.9.0"
    assert latency < 1.0, f"answered {latency:.3f} s after the commit"


def test_an_abort_with_rollback_releases_the_held_answer(server, agents, releases):
    (agent,) = agents(1)
    rollout = start(agent)
    rollout_tick(rollout_id=rollout.id)
    held = agent.watch(agent.session().json()["specRevision"], WAIT)
    server.wait_held(1)
    with committed() as since:
        rollout_abort(rollout_id=rollout.id, rollback=True)
    answer, latency = released(held, since)
    assert answer["spec"]["daemon"]["version"] == "0.9.0"
    assert latency < 1.0, f"answered {latency:.3f} s after the commit"


def test_a_command_releases_the_held_answer_of_an_old_agent(server, agents):
    (agent,) = agents(1, protocol=1)
    held = agent.watch(agent.session().json()["specRevision"], WAIT)
    server.wait_held(1)
    with committed() as since:
        command_enqueue(node_id=agent.node.id, kind="daemon.upgrade", payload={"version": "1.0.0"})
    answer, latency = released(held, since)
    assert [c["kind"] for c in answer["commands"]] == ["daemon.upgrade"]
    assert latency < 1.0, f"answered {latency:.3f} s after the commit"


def test_without_a_change_the_answer_comes_at_wait_as_a_heartbeat(server, agents):
    (agent,) = agents(1)
    plain = agent.session().json()
    started = time.monotonic()
    other = agent.session(wait=2, seen="another revision").json()  # differs: at once
    assert time.monotonic() - started < 1.5
    assert other == plain
    started = time.monotonic()
    answer, arrived = agent.watch(plain["specRevision"], 2).result(timeout=20)
    assert 2.0 <= arrived - started < 3.5
    assert answer.json() == plain


def test_old_agents_without_wait_are_answered_at_once(server, agents):
    (agent,) = agents(1)
    first = agent.session()
    started = time.monotonic()
    again = agent.session(seen=first.json()["specRevision"])  # seen without wait: nothing to hold on
    assert time.monotonic() - started < 1.5
    assert first.json() == again.json()
    assert set(again.json()) == {
        "spec",
        "commands",
        "heartbeatSeconds",
        "specRevision",
        "rootVersion",  # the rollout plug-in's field (fleet.plugins.register_session_fields)
    }
    assert again.headers["x-content-type-options"] == "nosniff"
    assert again.headers["x-frame-options"] == "DENY"


def test_a_request_the_front_hands_to_django_is_never_held_on_a_django_thread(server, agents):
    """A body with ``refused`` is Django's (its serializer): Django answers it at once, even with ``wait`` and a
    ``seen`` that stays current (the refusal names a version the node is not upgraded to: nothing changes), so that
    no agent can hold one of the few threads Django's views and the admin run on."""
    (agent,) = agents(1)
    seen = agent.session().json()["specRevision"]
    refused = {"version": "9.9.9", "code": "bad_signature", "detail": "not ours"}
    started = time.monotonic()
    answer = agent.session(refused=refused, wait=10, seen=seen)
    assert answer.status_code == 200, answer.text
    assert answer.json()["specRevision"] == seen
    assert time.monotonic() - started < 2.0, "held on a Django thread"


def test_a_join_that_would_repeat_seen_is_held_too(server, agents):
    (agent,) = agents(1)
    seen = agent.session().json()["specRevision"]
    assert httpx.delete(agent.url + SESSION, headers={"Authorization": f"Bearer {agent.token}"}).status_code == 204
    started = time.monotonic()
    response, arrived = agent.watch(seen, 2).result(timeout=20)  # a join (the agent left): answered, then held
    assert response.status_code == 200
    assert response.json()["specRevision"] == seen
    assert arrived - started >= 2.0
    assert NodeSession.objects.get(node=agent.node).left_at is None
    agent.session()  # and a join whose answer differs from seen comes at once
    httpx.delete(agent.url + SESSION, headers={"Authorization": f"Bearer {agent.token}"})
    started = time.monotonic()
    assert agent.session(wait=30, seen="another").status_code == 200
    assert time.monotonic() - started < 2


def test_what_the_front_does_not_take_is_django_s_answer(server, agents):
    (agent,) = agents(1)
    unknown = httpx.post(
        server.url + SESSION,
        json={"daemonVersion": "0.9.0", "protocolVersion": 3, "wait": 5, "seen": "x"},
        headers={"Authorization": "Bearer at_unknown"},
    )
    assert unknown.status_code == 401
    assert unknown.json()["code"] == "authentication_failed"
    too_large = httpx.post(
        server.url + SESSION,
        content=b'{"daemonVersion": "' + b"x" * (1 << 20) + b'"}',
        headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"},
    )
    assert too_large.status_code == 413
    assert too_large.json()["code"] == "too_large"


def test_wait_outside_1_to_60_is_400_and_writes_nothing(server, agents):
    (agent,) = agents(1)
    NodeSession.objects.filter(node=agent.node).delete()  # a join would create it: nothing may
    for wait in (0, 61, -1, "5", 5.5, True, None):
        response = agent.session(wait=wait, seen="x")
        assert response.status_code == 400, wait
        assert response.json()["code"] == "invalid_input", wait
        assert "wait" in response.json()["errors"], wait
    for seen in (5, None, "x" * 65, "nul\x00"):
        response = agent.session(wait=5, seen=seen)
        assert response.status_code == 400, seen
        assert "seen" in response.json()["errors"], seen
    assert not NodeSession.objects.filter(node=agent.node).exists()


def test_an_agent_that_only_watches_never_counts_offline(server, agents, heartbeat_seconds):
    (agent,) = agents(1)
    seen = agent.session().json()["specRevision"]
    wait = 3 * heartbeat_seconds + 2  # longer than the online window
    held = agent.watch(seen, wait)
    while not held.done():
        assert Node.objects.filter(online_node_q(now=timezone.now()), pk=agent.node.pk).exists()
        time.sleep(0.2)
    response, _ = held.result()
    assert response.status_code == 200
    # Released and gone quiet: offline one online window later, as a polling agent would be.
    wait_until(
        lambda: not Node.objects.filter(online_node_q(now=timezone.now()), pk=agent.node.pk).exists(),
        timeout=3 * heartbeat_seconds + heartbeat_seconds + 2,
        what="the node to go offline",
    )


def test_a_lost_subscription_answers_once_listening_resumes_then_recovers(server, agents):
    first, second = agents(2)
    wait_until(lambda: len(listener_pids()) == 1, timeout=10, what="the web process to LISTEN")
    seen = first.session().json()["specRevision"]
    held = first.watch(seen, WAIT)
    server.wait_held(1)
    with psycopg.connect(database_url(), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", [listener_pids()])
    wait_until(lambda: not listener_pids(), timeout=5, what="the LISTEN connection to be gone")
    arrived_at = time.monotonic()
    command_enqueue(node_id=first.node.id, kind="daemon.upgrade", payload={"version": "1.0.0"})  # nobody hears it
    answer, answered = held.result(timeout=WAIT + 20)
    # Not woken without a subscription; woken by the resync once the hub LISTENs again, long before WAIT.
    assert RECONNECT_SECONDS - 0.5 < answered - arrived_at < RECONNECT_SECONDS + 2, answered - arrived_at
    assert [c["kind"] for c in answer.json()["commands"]] == ["daemon.upgrade"]

    wait_until(lambda: len(listener_pids()) == 1, timeout=15, what="the web process to LISTEN again")
    held = second.watch(second.session().json()["specRevision"], WAIT)
    server.wait_held(1)
    with committed() as since:
        command_enqueue(node_id=second.node.id, kind="daemon.upgrade", payload={"version": "1.0.0"})
    _, latency = released(held, since)
    assert latency < 1.0, f"answered {latency:.3f} s after the commit"


def test_a_listen_connection_that_stops_answering_is_replaced(server, agents):
    """No error, no closed socket: its backend just stops (SIGSTOP), as a peer gone behind a NAT would look.
    The process's ping finds it out and LISTENs on a new connection; wakes are prompt again."""
    (agent,) = agents(1)
    wait_until(lambda: len(listener_pids()) == 1, timeout=10, what="the web process to LISTEN")
    (stalled,) = listener_pids()
    os.kill(stalled, signal.SIGSTOP)
    try:
        wait_until(lambda: set(listener_pids()) - {stalled}, timeout=4 * PING_SECONDS + 5, what="a new LISTEN")
        held = agent.watch(agent.session().json()["specRevision"], WAIT)
        server.wait_held(1)
        with committed() as since:
            command_enqueue(node_id=agent.node.id, kind="daemon.upgrade", payload={"version": "1.0.0"})
        _, latency = released(held, since)
        assert latency < 1.0, f"answered {latency:.3f} s after the commit"
    finally:
        os.kill(stalled, signal.SIGCONT)  # it finds its client gone and exits
        wait_until(lambda: stalled not in listener_pids(), timeout=10, what="the stalled backend to exit")


def test_a_thousand_held_requests_pin_no_connection_and_no_thread(server, tenant):
    tokens = bulk_agents(tenant, 1000)
    revision = httpx.post(
        server.url + SESSION,
        json={"daemonVersion": "0.9.0", "protocolVersion": 3},
        headers={"Authorization": f"Bearer {tokens[0]}"},
    ).json()["specRevision"]
    body = json.dumps({"daemonVersion": "0.9.0", "protocolVersion": 3, "wait": 8, "seen": revision}).encode()
    port = int(server.url.rsplit(":", 1)[1])
    answered: list[int] = []
    holding = threading.Thread(target=lambda: answered.append(asyncio.run(hold_all(port, tokens, body))))
    holding.start()
    try:
        server.wait_held(1000, timeout=60)
        with psycopg.connect(database_url(), autocommit=True) as conn:
            (connections,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [connection.settings_dict["NAME"]],
            ).fetchone()
        # The session threads, Django's threads, the LISTEN connection and this test process's own connection.
        assert connections <= 2 * THREADS + 2, connections
        assert threads_of(server.pid) < 40
    finally:
        holding.join(timeout=60)
    assert answered == [1000]


async def hold_all(port: int, tokens: list[str], body: bytes) -> int:
    """One connection per agent, each sending one held request; how many were answered 200. A request refused
    because the web process has as many under way as it takes (503 ``overloaded``) is sent again after its
    ``Retry-After`` and a random fraction of a second, as agents do (docs/fleet.md#retries)."""
    rng = random.Random(0)

    async def one(token: str) -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                writer.write(
                    f"POST {SESSION} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                if not head.startswith(b"HTTP/1.1 503"):
                    return head.startswith(b"HTTP/1.1 200")
                lines = head.decode().split("\r\n")[1:]
                fields = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
                await reader.readexactly(int(fields["content-length"]))
                await asyncio.sleep(int(fields["retry-after"]) + rng.random())
        finally:
            writer.close()

    return sum(await asyncio.gather(*(one(token) for token in tokens)))


def threads_of(pid: int) -> int:
    """Threads of the server's worker process (the child of gunicorn's arbiter)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    status = Path(f"/proc/{children[0]}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
