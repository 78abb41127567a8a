"""``GET /metrics`` never answers 500 (docs/operations.md#metrics): a real private PostgreSQL stopped under a
running web tier, then started again. Every scrape answers 200; ``rollout_database_up`` goes 1 -> 0 -> 1, and
the process metrics are served while the database is down.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from demo.processes import BASE_DIR, free_port, stop, wait_until, web_server
from tests.faults.stack import PG_BIN, PrivatePostgres

pytestmark = pytest.mark.integration


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"this test needs PostgreSQL's initdb/pg_ctl in {PG_BIN} (make test)")
    root = Path(tempfile.mkdtemp(prefix="metrics-pg-", dir="/tmp"))  # short: the socket path
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres")
    cluster = PrivatePostgres(root)
    try:
        cluster.init()
        cluster.start()
        cluster.create_database("metrics")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def scrape(url: str) -> tuple[int, str]:
    response = httpx.get(f"{url}/metrics", timeout=15)
    return response.status_code, response.text


def database_up(text: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith("rollout_database_up ")]
    return float(line.split()[1])


def test_metrics_answers_200_through_a_database_outage(postgres, tmp_path):
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        "DATABASE_URL": postgres.url("metrics"),
        "DATABASE_CONN_MAX_AGE": "60",  # kept connections: each is found dead and replaced
        "CELERY_BROKER_URL": "filesystem://",
        "ROLLOUT_RUN_DIR": str(tmp_path / "run"),
        "ROLLOUT_MEDIA_ROOT": str(tmp_path / "media"),
        "METRICS_PUBLIC": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),  # multiprocess mode, as compose and make web run it
        "LOG_LEVEL": "WARNING",
        "TEST_DATABASE_NAME": "",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=BASE_DIR,
        env={**os.environ, **env},
        check=True,
        timeout=300,
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "web.log"
    web = web_server(env, port=port, workers=1, threads=2, log_path=log)
    seen: list[float] = []

    def answers(expected_up: float) -> bool:
        status, text = scrape(url)
        assert status == 200, text[:2000]  # never a 500, whatever the database does
        assert "rollout_tick_seconds_count" in text  # the processes' own metrics, always
        seen.append(database_up(text))
        return seen[-1] == expected_up

    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/metrics", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=90, what="gunicorn to answer")
        assert answers(1)
        assert "rollout_active" in scrape(url)[1] or "fleet_" in scrape(url)[1]  # the state gauges

        postgres.stop("fast")
        wait_until(lambda: answers(0), timeout=30, poll=0.3, what="rollout_database_up 0")
        for _ in range(3):  # and it stays so, each scrape a 200
            assert answers(0)

        postgres.start()
        wait_until(lambda: answers(1), timeout=60, poll=0.3, what="rollout_database_up 1 again")
    finally:
        stop(web)
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            print(text[-6000:])
    assert (seen[0], 0 in seen, seen[-1]) == (1, True, 1)  # 1 -> 0 -> 1
    assert "Internal Server Error" not in text
