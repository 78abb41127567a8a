"""Properties of the wave split and the seeded shuffle (docs/controller.md#create)."""

import math
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InvalidInput
from rollout.rollouts.spec import options_validate, planned_waves, shuffle, wave_bounds

wave_lists = st.lists(st.integers(min_value=1, max_value=99), max_size=19, unique=True).map(
    lambda ps: [*sorted(ps), 100]
)


@given(waves=wave_lists, n=st.integers(min_value=0, max_value=5000))
def test_every_node_is_in_exactly_one_wave_and_sizes_follow_the_formula(waves, n):
    bounds = wave_bounds(waves, n)
    previous = 0
    for percent, (start, end) in zip(waves, bounds, strict=True):
        assert start == math.ceil(previous * n / 100)
        assert end == math.ceil(percent * n / 100)
        previous = percent
    positions = [p for start, end in bounds for p in range(start, end)]
    assert positions == list(range(n))
    planned = planned_waves(waves, n)
    assert all(wave.total > 0 for wave in planned)
    assert [wave.index for wave in planned] == list(range(len(planned)))
    assert sum(wave.total for wave in planned) == n


def test_the_default_waves_of_60_nodes():
    assert [w.total for w in planned_waves([1, 10, 50, 100], 60)] == [1, 5, 24, 30]


def test_empty_waves_are_skipped():
    # 10 nodes: ceil(1%·10)=1, ceil(2%·10)=1 (empty), ceil(100%·10)=10.
    assert [(w.index, w.percent, w.total) for w in planned_waves([1, 2, 100], 10)] == [(0, 1, 1), (1, 100, 9)]


@given(ids=st.lists(st.uuids(), min_size=2, max_size=300, unique=True), seed=st.uuids())
def test_same_id_same_order_whatever_the_input_order(ids, seed):
    assert shuffle(ids, seed=seed) == shuffle(list(reversed(ids)), seed=seed)
    assert sorted(shuffle(ids, seed=seed)) == sorted(ids)


def test_different_ids_give_different_orders():
    ids = [uuid.uuid4() for _ in range(50)]
    orders = {tuple(shuffle(ids, seed=uuid.uuid4())) for _ in range(20)}
    assert len(orders) == 20


def test_the_shuffle_is_stable_across_processes():
    ids = [uuid.UUID(int=i) for i in range(1, 6)]
    seed = uuid.UUID("00000000-0000-0000-0000-00000000beef")
    assert [u.int for u in shuffle(ids, seed=seed)] == [u.int for u in shuffle(ids, seed=seed)]
    assert shuffle(ids, seed=seed) != ids or shuffle(ids, seed=uuid.UUID(int=7)) != ids


def test_defaults():
    options = options_validate()
    assert options.waves == (1, 10, 50, 100)
    assert options.max_failure_ratio == Decimal("0.1")
    assert (options.soak_seconds, options.upgrade_timeout_seconds) == (300, 600)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"waves": [10, 5, 100]}, "invalid_waves"),
        ({"waves": [10, 10, 100]}, "invalid_waves"),
        ({"waves": [10, 50]}, "invalid_waves"),
        ({"waves": [0, 100]}, "invalid_waves"),
        ({"waves": [50, 101]}, "invalid_waves"),
        ({"waves": []}, "invalid_waves"),
        ({"waves": [*list(range(1, 21)), 100]}, "invalid_waves"),
        ({"waves": [True, 100]}, "invalid_waves"),
        ({"waves": "1,100"}, "invalid_waves"),
        ({"max_failure_ratio": -0.1}, "invalid_input"),
        ({"max_failure_ratio": 1.5}, "invalid_input"),
        ({"max_failure_ratio": True}, "invalid_input"),
        ({"soak_seconds": -1}, "invalid_input"),
        ({"soak_seconds": 1.5}, "invalid_input"),
        ({"upgrade_timeout_seconds": 0}, "invalid_input"),
    ],
)
def test_bad_options_are_refused(kwargs, code):
    with pytest.raises(InvalidInput) as caught:
        options_validate(**kwargs)
    assert caught.value.code == code


def test_twenty_waves_and_fractional_percentages_are_accepted():
    assert len(options_validate(waves=[*range(5, 100, 5), 100]).waves) == 20
    assert options_validate(waves=[0.5, 100]).waves == (0.5, 100)
