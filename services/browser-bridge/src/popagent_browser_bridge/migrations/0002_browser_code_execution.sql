-- Whether bifrostNavigator may run browser_run_code_unsafe (arbitrary Playwright code) for
-- interactive agents. Seeded by data migration 0002; no default.
ALTER TABLE popagent_browser_settings ADD COLUMN allow_code_execution boolean;
