"""The web tier a whole-system benchmark runs (benchmarks/efficiency.py ``run``): gunicorn alone, as the compose
file's ``web`` service runs it, or production's tier, nginx in front of it (``make web``: demo/web.py,
docker/nginx.conf), whose downloads Django hands to nginx (``ROLLOUT_DOWNLOADS_OFFLOAD=accel``)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from demo import web
from demo.processes import stop, web_server


@dataclass
class BenchTier:
    """The running tier: gunicorn (its master, whose process tree is the web CPU measured), and nginx, if any."""

    gunicorn: subprocess.Popen
    nginx: subprocess.Popen | None = None

    def stop(self) -> None:
        stop(*(process for process in (self.gunicorn, self.nginx) if process is not None))


def nginx_env(run_dir: Path) -> dict[str, str]:
    """The settings behind nginx, for the tier and for the benchmark's own process (which stores the binaries)."""
    return {"ROLLOUT_DOWNLOADS_OFFLOAD": "accel", "ROLLOUT_MEDIA_ROOT": str(run_dir / "media")}


def bench_tier(
    env: Mapping[str, str],
    *,
    port: int,
    workers: int,
    threads: int,
    logs: Path,
    addresses: Sequence[str],
    nginx_run_dir: Path | None,
) -> BenchTier:
    """gunicorn on ``port`` of each of ``addresses``; with ``nginx_run_dir``, nginx there instead, on the first
    address only, gunicorn behind it on a unix socket (``env`` holds ``nginx_env``'s settings then)."""
    sizes = {"WEB_WORKERS": str(workers), "WEB_THREADS": str(threads)}
    if nginx_run_dir is None:
        return BenchTier(web_server(env, port=port, workers=workers, threads=threads, log_path=logs / "web.log",
                                    addresses=addresses))  # fmt: skip
    if len(addresses) > 1:
        raise SystemExit("--nginx listens on one address (--addresses 1)")
    tier = web.start(
        {**env, **sizes},
        port=port,
        host=addresses[0],
        media_root=Path(env["ROLLOUT_MEDIA_ROOT"]),
        run_dir=nginx_run_dir,
        log_dir=logs,
    )
    return BenchTier(tier.processes["gunicorn"], tier.processes["nginx"])
