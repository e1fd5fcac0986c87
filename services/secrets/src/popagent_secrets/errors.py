"""Errors of the secrets service, named for the condition, placed in the kernel's tree."""

from __future__ import annotations

from popagent_core.errors import ConfigurationError, PopagentError


class SecretIntegrityError(PopagentError):
    """A stored secret failed authentication (tampered, truncated or moved to another row)."""


class UnknownSecretKey(ConfigurationError):
    """A stored secret was sealed under a key that is not configured."""
