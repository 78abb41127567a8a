"""core.statements.constant_array: code constants written into a statement's text, never anything that could quote."""

from __future__ import annotations

import pytest
from django.db import connection

from core.statements import constant_array
from rollout.models import Rollout


@pytest.mark.django_db
def test_the_array_is_the_constants_as_postgresql_reads_them():
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {constant_array(Rollout.ACTIVE_STATES)}")
        assert cursor.fetchone()[0] == [state.value for state in Rollout.ACTIVE_STATES]


@pytest.mark.parametrize("values", [[], ["active", "x') OR true --"], ["Active"], ["a b"]])
def test_anything_but_lower_case_words_is_refused(values):
    with pytest.raises(ValueError, match="not constants"):
        constant_array(values)
