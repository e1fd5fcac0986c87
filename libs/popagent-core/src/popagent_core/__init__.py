"""Kernel shared by every popagent service.

Only what would be identical in every service lives here: settings, logging, the error
tree, the database pool and migration runner, the NATS bus with its outbox relay, gRPC
server/client helpers and the process lifecycle. Development tools (the stack launcher,
embedded servers, test fixtures) live in popagent_dev, which the production image does not install.
"""
