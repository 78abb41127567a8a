"""Two registrations at the same moment cannot both pass the sequence check (PostgreSQL)."""

import pytest

from core.errors import DomainError
from rollout.models import Release
from rollout.registry.releases import release_register
from tests.concurrency import run_together
from tests.factories import manifest, signed

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_concurrent_registrations_of_the_same_next_sequence_one_wins():
    release_register(envelope=signed(manifest("1.0.0", 1)))
    envelopes = [signed(manifest("2.0.0", 2)), signed(manifest("2.0.1", 2))]
    outcomes: list[str] = []

    def register(envelope: bytes) -> None:
        try:
            release_register(envelope=envelope)
            outcomes.append("created")
        except DomainError as exc:
            outcomes.append(f"{exc.status}:{exc.code}")

    assert run_together(*(lambda e=envelope: register(e) for envelope in envelopes)) == []
    assert sorted(outcomes) == ["409:sequence_not_increasing", "created"]
    assert Release.objects.filter(sequence=2).count() == 1
