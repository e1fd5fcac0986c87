"""Root conftest: the kernel's pytest plugin (real PostgreSQL and NATS) is loaded via addopts."""
