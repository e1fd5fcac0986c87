"""Kernel shared by every popagent service.

Only what would be identical in every service lives here: settings, logging, the error
tree, the database pool and migration runner, the NATS bus with its outbox relay, gRPC
server/client helpers, the process lifecycle, the stack launcher and test fixtures.
"""
