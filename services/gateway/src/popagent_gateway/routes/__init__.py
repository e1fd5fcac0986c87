"""One router module per resource; every /api router is mounted behind the API-key dependency."""
