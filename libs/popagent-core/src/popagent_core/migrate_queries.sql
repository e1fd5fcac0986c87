-- The migration runner's lock and ledgers, run with search_path set to the schema being migrated.
-- Both ledgers have the same columns: `popagent_schema_migrations` (bootstrapped here, before any
-- migration can run) and `popagent_data_migrations` (a kernel migration).

-- name: lock
SELECT pg_advisory_lock(hashtext('popagent.migrate'), hashtext($1))

-- name: unlock
SELECT pg_advisory_unlock(hashtext('popagent.migrate'), hashtext($1))

-- name: create_schema_ledger
CREATE TABLE IF NOT EXISTS popagent_schema_migrations (
    scope text NOT NULL, name text NOT NULL, checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (scope, name))

-- name: applied_schema_migrations
SELECT name, checksum FROM popagent_schema_migrations WHERE scope = $1

-- name: record_schema_migration
INSERT INTO popagent_schema_migrations (scope, name, checksum) VALUES ($1, $2, $3)

-- name: applied_data_migrations
SELECT name, checksum FROM popagent_data_migrations WHERE scope = $1

-- name: record_data_migration
INSERT INTO popagent_data_migrations (scope, name, checksum) VALUES ($1, $2, $3)

-- name: ledger_exists
SELECT to_regclass($1) IS NOT NULL
