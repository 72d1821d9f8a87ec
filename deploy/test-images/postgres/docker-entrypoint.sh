#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TEST ONLY. The parts of the official postgres image's entrypoint that
# compose files and testcontainers rely on: on first start, initdb with
# POSTGRES_USER / POSTGRES_PASSWORD, create POSTGRES_DB, run the files in
# /docker-entrypoint-initdb.d on a server that listens on no TCP port (so
# TCP health checks pass only once it is really up), then exec the server.
set -euo pipefail

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 >/dev/null
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # Its log goes to the container's, as in the official image: clients that wait
  # for the second "ready to accept connections" line keep working.
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start
  export PGUSER=$user
  if [ "$db" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -q -d postgres -c "CREATE DATABASE \"$db\""
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
      *.sql) psql -v ON_ERROR_STOP=1 -q -d "$db" -f "$f" ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  unset PGUSER
  echo "docker-entrypoint.sh: PostgreSQL init process complete; ready for start up." >&2
fi
exec "$@"
