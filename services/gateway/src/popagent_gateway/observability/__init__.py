"""The gateway's read side of the observability store (OBSERVABILITY_DATABASE_URL)."""
