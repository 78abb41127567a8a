"""The benchmarks' own PostgreSQL databases: each benchmark drops and recreates one on DATABASE_URL's server."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/rollout"


def database_urls(base_url: str, name: str) -> tuple[str, str]:
    """(the bench database URL, the maintenance ``postgres`` database URL) on the server of ``base_url``."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise SystemExit(f"the benchmark needs PostgreSQL: set DATABASE_URL=postgres://..., not {parts.scheme!r}")
    return urlunsplit(parts._replace(path=f"/{name}")), urlunsplit(parts._replace(path="/postgres"))


def recreate_database(admin_url: str, name: str) -> None:
    """Drop (closing its connections) and create the database ``name`` (never the one DATABASE_URL names)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
