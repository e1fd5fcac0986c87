-- A stable id per secret, for `DELETE /api/secrets/:id`. Resource and name stay the
-- natural key (provision-or-rotate upserts on them, and the ciphertext's associated data
-- binds them); the id survives rotation and re-encryption because neither rewrites it.
-- gen_random_uuid() is volatile, so rows that exist already get one id each.
ALTER TABLE popagent_secrets ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE popagent_secrets ADD CONSTRAINT popagent_secrets_id_key UNIQUE (id);
