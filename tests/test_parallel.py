"""The parallel workers' services (tests/parallel.py): each worker's own, so that none consumes another's work."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import connection

from tests.parallel import GIVEN, amqp_url_for, redis_url_for, worker_number


def test_a_worker_gets_the_redis_database_its_number_below_and_a_vhost_of_its_own():
    assert redis_url_for("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert redis_url_for("redis://127.0.0.1:6379/15", 2) == "redis://127.0.0.1:6379/13"
    assert amqp_url_for("amqp://guest:guest@127.0.0.1:5672//", 1) == "amqp://guest:guest@127.0.0.1:5672/gw1"
    assert amqp_url_for("amqp://guest:guest@127.0.0.1:5672/h20", 0) == "amqp://guest:guest@127.0.0.1:5672/h20-gw0"
    with pytest.raises(ValueError, match="no Redis database is left"):
        redis_url_for("redis://127.0.0.1:6379/1", 2)


@pytest.mark.django_db
def test_this_worker_runs_on_its_own_database_and_broker():
    number = worker_number()
    if number is None:  # one process: the services as given
        assert "_gw" not in connection.settings_dict["NAME"]
        return
    assert connection.settings_dict["NAME"].endswith(f"_gw{number}")
    if GIVEN["CELERY_BROKER_URL"].startswith("redis://"):
        assert redis_url_for(GIVEN["CELERY_BROKER_URL"], number) == settings.CELERY_BROKER_URL
    if GIVEN["AMQP_URL"].startswith("amqp://"):
        assert os.environ["AMQP_URL"] == amqp_url_for(GIVEN["AMQP_URL"], number)
