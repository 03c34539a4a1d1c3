#!/usr/bin/env bash
# The primary's first start (docker-entrypoint-initdb.d): let the standby connect for replication,
# with the superuser's password, from the compose network.
set -euo pipefail
echo "host replication postgres all scram-sha-256" >> "$PGDATA/pg_hba.conf"
