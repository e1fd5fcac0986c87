UPDATE popagent_browser_settings SET allow_code_execution = false WHERE id = 1 AND allow_code_execution IS NULL;
