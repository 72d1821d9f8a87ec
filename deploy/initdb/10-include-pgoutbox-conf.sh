#!/bin/sh
# SPDX-License-Identifier: MIT
# Run once by the postgres image on first start: includes deploy/postgresql.conf
# (mounted at /etc/postgresql/pgoutbox.conf by compose.yaml), so the settings
# keep their comments in one file instead of a list of -c flags.
echo "include = '/etc/postgresql/pgoutbox.conf'" >>"$PGDATA/postgresql.conf"
