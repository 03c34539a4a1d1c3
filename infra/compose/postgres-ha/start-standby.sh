#!/usr/bin/env bash
# The standby's entrypoint: the first time, a base backup of the primary through a physical slot
# of its own (standby.signal and primary_conninfo written by -R); then PostgreSQL as usual, which
# starts as the primary's streaming standby. After a promotion the data is a primary's: remove the
# postgres-standby-data volume to make it a standby again.
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  until pg_isready -h postgres -U postgres -q; do sleep 1; done
  psql -h postgres -U postgres -qAt -c \
    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'standby'"
  mkdir -p "$PGDATA" && chown postgres "$PGDATA" && chmod 700 "$PGDATA"
  gosu postgres pg_basebackup --pgdata "$PGDATA" --dbname "host=postgres user=postgres application_name=standby" \
    --wal-method=stream --checkpoint=fast --write-recovery-conf --create-slot --slot standby
fi
exec docker-entrypoint.sh "$@"
