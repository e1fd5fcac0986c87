-- Global browser capability (spec: GET/PATCH /api/settings/browser). Seeded once; no defaults.
CREATE TABLE popagent_browser_settings (
    id smallint PRIMARY KEY CHECK (id = 1),
    enabled boolean NOT NULL,
    updated_at timestamptz NOT NULL
);
