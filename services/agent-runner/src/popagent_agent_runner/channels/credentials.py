"""A connection's credentials in the secrets service: resource `channels`, named by the connection's id,
one JSON object per connection (the bot token and the platform's inbound check: Slack's signing
secret, Telegram's webhook secret token, Discord's application public key).

agent-runner may store, delete and resolve secrets of that resource only (the secrets service checks
it); they are resolved when an event is checked or a reply is posted, and never returned by a route.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from popagent.secrets.v1 import secrets_pb2_grpc
from popagent_agent_runner.state.named_secrets import NamedSecrets
from popagent_core.errors import InvalidArgument

CREDENTIALS_RESOURCE = "channels"
MAX_CREDENTIAL_CHARS = 4000
# What each platform's connection needs: the bot token it posts with and the key its inbound
# deliveries are checked with.
REQUIRED: dict[str, tuple[str, ...]] = {
    "slack": ("botToken", "signingSecret"),
    "telegram": ("botToken", "secretToken"),
    "discord": ("botToken", "publicKey"),
    # The bot user's access token: it both reads (/sync) and posts; no delivery comes to a webhook.
    "matrix": ("botToken",),
}
INBOUND_KEY = {"slack": "signingSecret", "telegram": "secretToken", "discord": "publicKey"}
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")
# Telegram allows 1-256 characters A-Z, a-z, 0-9, _ and - in a webhook's secret_token.
_TELEGRAM_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True)
class Credentials:
    bot_token: str
    # Slack's signing secret, Telegram's secret token or Discord's public key (hex); "" for Matrix.
    inbound_key: str

    def __repr__(self) -> str:  # never the values, wherever a record is logged
        return "Credentials(<kept in the secrets service>)"


def checked_credentials(platform: str, values: dict[str, str]) -> dict[str, str]:
    """The credentials a platform needs, each present and well formed; InvalidArgument naming the first bad one."""
    needed = REQUIRED[platform]
    unknown = sorted(set(values) - set(needed))
    if unknown:
        raise InvalidArgument(f"credentials for {platform} take {', '.join(needed)}; not {', '.join(unknown)}")
    for name in needed:
        value = values.get(name, "")
        if not value:
            raise InvalidArgument(f"credentials.{name} is required for {platform}")
        if len(value) > MAX_CREDENTIAL_CHARS or not _PRINTABLE.fullmatch(value):
            raise InvalidArgument(
                f"credentials.{name} must be at most {MAX_CREDENTIAL_CHARS} printable ASCII characters, no spaces"
            )
    if platform == "telegram" and not _TELEGRAM_SECRET.fullmatch(values["secretToken"]):
        raise InvalidArgument("credentials.secretToken must be 1 to 256 of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
    if platform == "discord" and not _HEX_KEY.fullmatch(values["publicKey"]):
        raise InvalidArgument("credentials.publicKey must be the application's Ed25519 public key, 64 hex digits")
    return {name: values[name] for name in needed}


def parsed_credentials(platform: str, value: str) -> Credentials:
    stored: dict[str, str] = orjson.loads(value)
    inbound = INBOUND_KEY.get(platform)
    return Credentials(stored["botToken"], stored[inbound] if inbound else "")


class ChannelCredentials:
    """A connection's credentials, one JSON object named by the connection's id."""

    def __init__(self, stub: secrets_pb2_grpc.SecretsServiceStub) -> None:
        self._secrets = NamedSecrets(stub, CREDENTIALS_RESOURCE)

    async def put(self, connection_id: str, values: dict[str, str]) -> None:
        await self._secrets.put(connection_id, orjson.dumps(values).decode())

    async def delete(self, connection_id: str) -> None:
        await self._secrets.delete(connection_id)

    async def resolve(self, platform: str, connection_id: str) -> Credentials:
        return parsed_credentials(platform, await self._secrets.resolve(connection_id))
