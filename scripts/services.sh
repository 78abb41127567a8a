#!/usr/bin/env bash
# Start PostgreSQL and Redis when they are installed but not running, and make
# sure the project's database exists. Idempotent; used by `make test`.
set -euo pipefail

PGHOST=127.0.0.1
PGPORT=5432
PGUSER=${PGUSER:-postgres}
DBNAME=${ROLLOUT_PG_DB:-rollout}

wait_for() {  # wait_for <what> <command...>: poll a readiness probe, up to 30 s
  local what=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "services: $what did not become ready" >&2
  return 1
}

if command -v pg_isready >/dev/null && ! pg_isready -h "$PGHOST" -p "$PGPORT" -q; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "services: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
fi
wait_for PostgreSQL pg_isready -h "$PGHOST" -p "$PGPORT" -q

if command -v redis-cli >/dev/null && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null; then
    echo "services: starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  fi
fi
wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping

if ! psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -tAc "select 1 from pg_database where datname='$DBNAME'" | grep -q 1; then
  psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -qc "create database $DBNAME"
fi
