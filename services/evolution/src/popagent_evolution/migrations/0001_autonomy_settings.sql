-- Autonomy controls (spec: GET/PATCH /api/settings/autonomy). Singleton row seeded once
-- by data migration 0001; configurable columns deliberately have no defaults.
CREATE TABLE popagent_autonomy_settings (
    id smallint PRIMARY KEY CHECK (id = 1),
    evolution_enabled boolean NOT NULL,
    skill_creation_enabled boolean NOT NULL,
    self_update_enabled boolean NOT NULL,
    self_update_cron text NOT NULL,
    updated_at timestamptz NOT NULL
);
