#!/usr/bin/env bash
# Start PostgreSQL, Redis and RabbitMQ when they are installed but not running, and make
# sure the project's database (and AMQP_URL's RabbitMQ vhost) exists. Idempotent; used by
# `make test`. A service that is missing or does not start is an error, never skipped.
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

if ! command -v rabbitmq-server >/dev/null; then
  echo "services: rabbitmq-server is not installed (scripts/system-deps.sh installs it)" >&2
  exit 1
fi
if ! rabbitmq-diagnostics -q ping >/dev/null 2>&1; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached >/dev/null 2>&1 || true
fi
wait_for RabbitMQ rabbitmq-diagnostics -q ping
# The vhost named in AMQP_URL (a parallel run's own, like its Redis database), and one per pytest worker
# (TEST_WORKERS: gwN, or <vhost>-gwN, as tests/parallel.py names them), each with guest's permissions.
VHOST=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]).path[1:]; print(u.unquote(p) or "/")' \
  "${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672//}")
VHOSTS=("$VHOST")
for ((i = 0; i < ${TEST_WORKERS:-0}; i++)); do
  if [ "$VHOST" = / ]; then VHOSTS+=("gw$i"); else VHOSTS+=("$VHOST-gw$i"); fi
done
EXISTING=$(rabbitmqctl -q list_vhosts)
for vhost in "${VHOSTS[@]}"; do
  if ! grep -qxF "$vhost" <<<"$EXISTING"; then
    rabbitmqctl -q add_vhost "$vhost"
    rabbitmqctl -q set_permissions -p "$vhost" guest ".*" ".*" ".*"
  fi
done

if ! psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -tAc "select 1 from pg_database where datname='$DBNAME'" | grep -q 1; then
  psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -qc "create database $DBNAME"
fi
