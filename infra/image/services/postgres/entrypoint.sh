#!/bin/sh
# A throwaway test cluster, set up as infra/local/postgres.py sets up the local one:
# trust authentication (nothing secret lives in it), UTF-8, C.UTF-8, logical
# decoding on. Listens on PG_LISTEN:PGPORT.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    initdb -D "$PGDATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 > /dev/null
    # Clients reach a container from outside its loopback (a bridge, a port proxy).
    echo 'host all all all trust' >> "$PGDATA/pg_hba.conf"
fi
exec postgres -D "$PGDATA" -p "$PGPORT" -k /tmp \
    -c listen_addresses="$PG_LISTEN" \
    -c wal_level=logical -c max_wal_senders=10 -c max_replication_slots=10
