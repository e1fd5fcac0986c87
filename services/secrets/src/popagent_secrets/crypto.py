"""AES-256-GCM sealing of secret values, bound to their resource, name and key.

- A fresh random 96-bit nonce per encryption (`os.urandom`): never a counter, so two
  replicas or a restarted process can never reuse one under the same key.
- The associated data binds a ciphertext to (resource id, name, key id) with length
  prefixes, so no two different pairs give the same bytes ("ab"+"c" vs "a"+"bc") and a
  row copied or swapped to another (resource, name) fails authentication.
- Every ciphertext carries the id of the key that sealed it, so keys can rotate: the
  keyring decrypts with current or previous keys and always seals with the current one.

Decryption failures surface as `cryptography.exceptions.InvalidTag` and never carry
partial plaintext (GCM verifies the tag before releasing anything).
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from popagent_secrets.errors import UnknownSecretKey

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
AAD_VERSION = 1
# NIST SP 800-38D §8.3: at most 2^32 invocations of GCM with random 96-bit nonces per key.
MAX_ENCRYPTIONS_PER_KEY = 2**32
# Domain separation: the key id is a public label, never usable as key material.
_KEY_ID_LABEL = b"popagent.secrets.key-id.v1\x00"


def key_id_for(key: bytes) -> str:
    """Public label of a key: first 8 bytes of SHA-256(label || key), hex."""
    return hashlib.sha256(_KEY_ID_LABEL + key).digest()[:8].hex()


def associated_data(resource_id: str, name: str, key_id: str) -> bytes:
    """version byte, then each field as 4-byte big-endian length + UTF-8 bytes."""
    parts = [bytes([AAD_VERSION])]
    for field in (resource_id, name, key_id):
        encoded = field.encode()
        parts.append(struct.pack(">I", len(encoded)))
        parts.append(encoded)
    return b"".join(parts)


def encrypt(key: bytes, nonce: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """AES-256-GCM with a 96-bit nonce and a 128-bit tag; returns ciphertext || tag."""
    _check(key, nonce)
    return AESGCM(key).encrypt(nonce, plaintext, aad)


def decrypt(key: bytes, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
    """Inverse of `encrypt`; raises InvalidTag on any tampering or mismatch."""
    _check(key, nonce)
    return AESGCM(key).decrypt(nonce, ciphertext, aad)


def _check(key: bytes, nonce: bytes) -> None:
    # Other nonce lengths are legal GCM but go through GHASH; only 96 bits are ever used here.
    if len(key) != KEY_BYTES:
        raise ValueError("AES-256-GCM needs a 32-byte key")
    if len(nonce) != NONCE_BYTES:
        raise ValueError("nonce must be 96 bits")


class SecretKey:
    """One 32-byte key and its id. The key bytes never appear in repr or str."""

    __slots__ = ("_aead", "key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("AES-256-GCM needs a 32-byte key")
        self.key_id = key_id_for(key)
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return f"SecretKey(key_id={self.key_id!r})"


@dataclass(frozen=True)
class Sealed:
    """What is stored: key id, nonce, ciphertext || tag. Never the plaintext."""

    key_id: str
    nonce: bytes
    ciphertext: bytes

    def __repr__(self) -> str:
        return f"Sealed(key_id={self.key_id!r}, nonce=<{len(self.nonce)} bytes>, ciphertext=<{len(self.ciphertext)} bytes>)"


class Keyring:
    """Seals with the current key; opens with the current or any previous key."""

    def __init__(self, current: bytes, previous: tuple[bytes, ...] = ()) -> None:
        self.current = SecretKey(current)
        self._by_id: dict[str, SecretKey] = {}
        for key in (current, *previous):
            secret_key = SecretKey(key)
            self._by_id.setdefault(secret_key.key_id, secret_key)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._by_id)

    def seal(self, plaintext: bytes, resource_id: str, name: str) -> Sealed:
        key = self.current
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = key._aead.encrypt(nonce, plaintext, associated_data(resource_id, name, key.key_id))
        return Sealed(key.key_id, nonce, ciphertext)

    def open(self, sealed: Sealed, resource_id: str, name: str) -> bytes:
        key = self._by_id.get(sealed.key_id)
        if key is None:
            raise UnknownSecretKey(
                f"secret was sealed under key id {sealed.key_id}, which is neither POPAGENT_SECRET_KEY "
                "nor in POPAGENT_SECRET_PREVIOUS_KEYS"
            )
        if len(sealed.nonce) != NONCE_BYTES:
            # AESGCM accepts other lengths; a stored nonce of another length is tampering.
            raise InvalidTag()
        return key._aead.decrypt(sealed.nonce, sealed.ciphertext, associated_data(resource_id, name, key.key_id))
