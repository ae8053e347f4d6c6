#!/bin/sh
# The role wagate connects as: it owns its database and is no superuser, so whoever has
# WAGATE_DATABASE_URL can neither read the server's files or environment nor run programs on it.
# Run once by the postgres image on an empty data directory (mounted in /docker-entrypoint-initdb.d
# by compose.yaml), as its superuser. On a server of your own, the same as:
#
#     CREATE ROLE wagate LOGIN PASSWORD '...';
#     CREATE DATABASE wagate OWNER wagate;
#
# The migrations need nothing more than owning the database (its schema `public` then is the role's).
set -e
: "${APP_DB_PASSWORD:?set APP_DB_PASSWORD in deploy/postgres.env: the password of WAGATE_DATABASE_URL}"
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set role="${APP_DB_USER:-wagate}" --set database="${APP_DB_NAME:-wagate}" \
    --set password="$APP_DB_PASSWORD" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
CREATE DATABASE :"database" OWNER :"role";
REVOKE ALL ON DATABASE :"database" FROM PUBLIC;
SQL
