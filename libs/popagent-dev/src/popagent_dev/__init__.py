"""What a developer's machine and the test suite run around the services, never the production image.

The stack launcher behind `make run` (`launcher`), embedded PostgreSQL and NATS and the port picker
(`embedded`), and the pytest plugin that gives every test real servers (`pytest_plugin`).
"""
