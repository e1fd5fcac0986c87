"""Domain shapes and the bounds every entry point checks before touching storage."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from popagent_core.errors import InvalidArgument

MAX_VALUE_BYTES = 8 * 1024
MAX_ORIGINS_PER_SECRET = 16
MAX_SECRETS_PER_RESOURCE = 200
MAX_LISTED = 1000
# Resource ids are the scopes a secret belongs to (`popagent-user`, agent ids, ...).
_RESOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
# Names are matched exactly (case-sensitive); a small charset keeps them safe in URLs and logs.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class StoredSecret:
    """The answer of provision-or-rotate: the secret, and whether this call created it."""

    info: SecretInfo
    created: bool


@dataclass(frozen=True)
class SecretInfo:
    """Metadata of one secret. Deliberately has no field for the value or ciphertext."""

    id: str
    resource_id: str
    name: str
    origins: tuple[str, ...]
    created_at: datetime
    updated_at: datetime


def check_resource_id(resource_id: str) -> str:
    if not _RESOURCE_ID.fullmatch(resource_id):
        raise InvalidArgument(
            "resource_id must be 1-128 characters of letters, digits, '_', '.', ':', '-' starting with a letter or digit"
        )
    return resource_id


def check_secret_id(secret_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(secret_id)
    except ValueError:
        raise InvalidArgument("id must be a secret id (a UUID)") from None


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            "name must be 1-128 characters of letters, digits, '_', '.', '-' starting with a letter or digit"
        )
    return name


def check_value(value: str) -> bytes:
    """The value's UTF-8 bytes. Error messages never include the value."""
    encoded = value.encode()
    if not encoded:
        raise InvalidArgument("value must not be empty")
    if len(encoded) > MAX_VALUE_BYTES:
        raise InvalidArgument(f"value must be at most {MAX_VALUE_BYTES} bytes")
    return encoded
