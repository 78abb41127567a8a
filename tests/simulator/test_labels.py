"""``simulate_agents --labels``: a seeded share of the enrolled nodes carries each label (docs/simulator.md)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from fleet.models import Node
from simulator.config import SimulatorError
from simulator.enrolment import LabelShare, labels_for, parse_label_shares
from tests.factories import pin

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_shares_parse_and_are_seeded():
    shares = parse_label_shares("ring=canary:0.05, zone=a:0.5,empty=:1")
    assert shares == [LabelShare("ring", "canary", 0.05), LabelShare("zone", "a", 0.5), LabelShare("empty", "", 1.0)]
    labels = labels_for(200, shares, seed=3)
    assert sum(1 for node in labels if node.get("ring") == "canary") == 10
    assert sum(1 for node in labels if node.get("zone") == "a") == 100
    assert all(node["empty"] == "" for node in labels)
    assert labels == labels_for(200, shares, seed=3)
    assert labels != labels_for(200, shares, seed=4)
    for bad in ("ring", "ring=canary", "ring=canary:2", "=a:0.1", "ring=canary:x"):
        with pytest.raises(SimulatorError):
            parse_label_shares(bad)


def test_the_command_enrolls_labelled_nodes(live_server, tenant, operator_key):
    call_command(
        "simulate_agents",
        "--server",
        live_server.url,
        "--api-key",
        operator_key,
        "--release-pin",
        pin(0),
        "--enroll",
        "--count",
        "20",
        "--pools",
        "sim-l",
        "--create-pools",
        "--labels",
        "ring=canary:0.05,zone=a:0.5",
        "--offline-share",
        "1",
        "--duration",
        "0.5",
    )
    nodes = Node.objects.filter(tenant=tenant)
    assert nodes.count() == 20
    assert nodes.filter(labels__contains={"ring": "canary"}).count() == 1
    assert nodes.filter(labels__contains={"zone": "a"}).count() == 10
