"""`make demo` from anywhere (README.md, "make demo"): as root, from a clone in a 0700 folder (root's home),
the demo's PostgreSQL runs as another user from a folder that user can reach, linked from the run directory,
and says where; the console the demo prints can plan a rollout (a downloads URL it serves itself: no
rollout.W002).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import psycopg
import pytest

from demo.__main__ import CONSOLE_ADDRESS, _environment
from demo.postgres import ENVIRONMENT, EmbeddedPostgres, forget_root
from demo.processes import BASE_DIR, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def private_folder() -> Path:
    """A 0700 folder under a 0700 folder, as a clone in /root/x is."""
    parent = Path(tempfile.mkdtemp(prefix="root-home-"))
    parent.chmod(0o700)
    run_dir = parent / "x" / ".run" / "demo"
    run_dir.mkdir(parents=True)
    (parent / "x").chmod(0o700)
    yield run_dir
    subprocess.run(["rm", "-rf", str(parent)], check=False)


def test_the_demo_s_postgresql_runs_as_root_from_a_0700_folder(private_folder):
    root = private_folder / "postgres"
    server = EmbeddedPostgres(root)
    try:
        if os.geteuid() == 0:  # (make test runs as root) PostgreSQL runs as postgres, who cannot enter the folder
            assert server.moved
            assert root.is_symlink()
            assert server.root == Path(os.readlink(root))
            assert server.user is not None
            assert server.root.stat().st_uid == server.user.pw_uid
        else:  # as anyone else it runs as ourselves: the run directory is its own
            assert (server.moved, server.root) == (False, root)
        url = server.start()
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("rollout",)
        assert (root / "data" / "PG_VERSION").exists()  # reached through the run directory's link
    finally:
        server.stop()
    again = EmbeddedPostgres(root)  # `python -m demo.postgres RUN_DIR -- …`: the same cluster, found again
    try:
        assert again.root == server.root
        again.start()
    finally:
        again.stop()
        forget_root(root)
    assert not server.root.exists() or not server.moved


def test_the_demo_s_console_has_a_downloads_url_it_serves(tmp_path):
    with mock.patch.dict(os.environ):  # _environment exports the demo's configuration to its own process
        _environment(tmp_path, "postgres://postgres@127.0.0.1:9/nothing")
    saved = json.loads((tmp_path / ENVIRONMENT).read_text())
    assert saved["ROLLOUT_DOWNLOADS_URL"] == f"http://{CONSOLE_ADDRESS}/api/compute/downloads"
    env = {
        **os.environ,
        **saved,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/nothing",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert "rollout.W002" not in done.stdout + done.stderr
    assert "rollout.W001" not in done.stdout + done.stderr  # the demo's pins too
