"""Root conftest. The kernel's plugin (real PostgreSQL and NATS) loads through addopts; the
canary plugin makes every test fail whose captured output holds the session's canary secret."""

pytest_plugins = ["support.canary", "pytester"]
