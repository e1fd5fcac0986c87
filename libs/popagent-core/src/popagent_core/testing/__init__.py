"""pytest fixtures shared by every service's tests (real PostgreSQL, real NATS)."""
