"""Settings of the secrets service, built at start.

`POPAGENT_SECRET_KEY` is a base64-encoded 32-byte key; `POPAGENT_SECRET_PREVIOUS_KEYS`
(optional, comma-separated, same encoding) are keys still accepted for decryption while
rows move to the current key (`python -m popagent_secrets reencrypt`). A bad key stops
the process at start with one line naming the variable; the value is never echoed.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode

from popagent_core.settings import ServiceSettings, grpc_address_field
from popagent_secrets.crypto import KEY_BYTES, Keyring, key_id_for


def decode_key(value: object) -> bytes:
    """32 key bytes from standard base64; messages say what is wrong, never the value."""
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        try:
            raw = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be standard base64") from None
    else:
        raise ValueError("must be a base64 string")
    if len(raw) != KEY_BYTES:
        raise ValueError(f"must decode to exactly {KEY_BYTES} bytes (got {len(raw)})")
    if raw == bytes(KEY_BYTES):
        raise ValueError("must not be all zero bytes")
    return raw


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("secrets")
    secret_key: bytes = Field(validation_alias="POPAGENT_SECRET_KEY", repr=False)
    # NoDecode: a comma-separated list, not JSON.
    previous_keys: Annotated[tuple[bytes, ...], NoDecode] = Field(
        default=(), validation_alias="POPAGENT_SECRET_PREVIOUS_KEYS", repr=False
    )

    @field_validator("secret_key", mode="before")
    @classmethod
    def _secret_key(cls, value: object) -> bytes:
        return decode_key(value)

    @field_validator("previous_keys", mode="before")
    @classmethod
    def _previous_keys(cls, value: object, info: ValidationInfo) -> tuple[bytes, ...]:
        if isinstance(value, str):
            items: list[object] = [item for item in value.split(",") if item.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise ValueError("must be comma-separated base64 keys")
        keys = []
        for position, item in enumerate(items, start=1):
            try:
                keys.append(decode_key(item))
            except ValueError as exc:
                raise ValueError(f"key {position} {exc}") from None
        # secret_key is declared first, so it is in info.data when it was valid.
        current = info.data.get("secret_key")
        ids = [key_id_for(key) for key in (*([current] if current else []), *keys)]
        if len(set(ids)) != len(ids):
            raise ValueError("must not repeat a key or contain POPAGENT_SECRET_KEY")
        return tuple(keys)

    def keyring(self) -> Keyring:
        return Keyring(self.secret_key, self.previous_keys)
