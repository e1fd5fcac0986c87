"""RELIABILITY row 22 across processes: no (key id, nonce) pair repeats when 16 processes forked
from one keyring seal at once (bench/secrets_nonces.py runs the full 1e6).

Forked workers start from the same memory: a nonce drawn from state kept in the process (a seeded
PRNG, a counter) would repeat across them, as it would across replicas started from one image.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection

from popagent_secrets.crypto import NONCE_BYTES, Keyring

PROCESSES = 16
SEALS_PER_PROCESS = 4_000


def seal_and_send(keyring: Keyring, count: int, pipe: Connection) -> None:
    pairs = bytearray()
    for n in range(count):
        sealed = keyring.seal(b"value", "resource", f"name-{n}")
        pairs += sealed.key_id.encode() + sealed.nonce
    pipe.send_bytes(bytes(pairs))
    pipe.close()


def test_sixteen_forked_processes_never_repeat_a_key_id_nonce_pair() -> None:
    old_key, new_key = os.urandom(32), os.urandom(32)
    # Half the workers seal before a rotation and half after it: both keys' pairs are counted.
    keyrings = [Keyring(old_key), Keyring(new_key, previous=(old_key,))]
    fork = multiprocessing.get_context("fork")
    receivers, workers = [], []
    for n in range(PROCESSES):
        receiver, sender = fork.Pipe(duplex=False)
        worker = fork.Process(target=seal_and_send, args=(keyrings[n % 2], SEALS_PER_PROCESS, sender))
        worker.start()
        sender.close()
        receivers.append(receiver)
        workers.append(worker)
    blobs = [receiver.recv_bytes() for receiver in receivers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    record = 16 + NONCE_BYTES
    pairs = [blob[offset : offset + record] for blob in blobs for offset in range(0, len(blob), record)]
    assert len(pairs) == PROCESSES * SEALS_PER_PROCESS
    assert len(set(pairs)) == len(pairs)
    assert {pair[:16] for pair in pairs} == {keyring.current.key_id.encode() for keyring in keyrings}
