"""Nonce uniqueness across processes (RELIABILITY row 22): 1e6 encryptions over 16 processes, 0
duplicate (key id, nonce) pairs.

    .venv/bin/python bench/secrets_nonces.py [--encryptions 1000000] [--processes 16]

The encryptions are the secrets service's own (`popagent_secrets.crypto.Keyring.seal`: AES-256-GCM
with a fresh random 96-bit nonce each time). The keyring is built once in this process and the
workers are *forked* from it, so they all start from the same memory: a nonce source that kept
state in the process (a seeded PRNG, a counter) would repeat across the workers, which is the way
two replicas or a forked pre-loaded server would reuse nonces under one key. Half the workers seal
under the current key and half after a rotation to a second key, so the pairs of both key ids are
counted. Each worker writes its (key id, nonce) pairs to a file; this process reads them all and
counts the distinct pairs.

Printed: duplicates (target 0), distinct key ids, and the seal rate over all workers against one
worker's rate measured alone in the same run (the ratio: how the seals scale over the cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

from popagent_secrets.crypto import NONCE_BYTES, Keyring

PLAINTEXT = b"Tr0ub4dor&3-correct-horse-battery-staple"
KEY_ID_CHARS = 16  # 8 bytes, hex


def seal_into(keyring: Keyring, count: int, out: str) -> None:
    """Seal `count` values and append each key id || nonce to the file `out` (a forked worker)."""
    records = bytearray()
    for n in range(count):
        sealed = keyring.seal(PLAINTEXT, "bench-resource", f"secret-{n % 64}")
        records += sealed.key_id.encode() + sealed.nonce
    Path(out).write_bytes(bytes(records))


def run_workers(keyrings: list[Keyring], per_worker: int, folder: Path) -> tuple[float, list[Path]]:
    """(wall seconds, output files) of one forked worker per keyring, all at once."""
    fork = multiprocessing.get_context("fork")
    outputs = [folder / f"worker-{n}.bin" for n in range(len(keyrings))]
    workers = [
        fork.Process(target=seal_into, args=(keyring, per_worker, str(out)))
        for keyring, out in zip(keyrings, outputs, strict=True)
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    failed = [worker.exitcode for worker in workers if worker.exitcode != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} workers failed: exit codes {failed}")
    return wall, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--encryptions", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=16)
    args = parser.parse_args()
    per_worker = args.encryptions // args.processes
    total = per_worker * args.processes
    old_key, new_key = os.urandom(32), os.urandom(32)
    before_rotation = Keyring(old_key)
    after_rotation = Keyring(new_key, previous=(old_key,))
    keyrings = [before_rotation if n % 2 == 0 else after_rotation for n in range(args.processes)]
    record = KEY_ID_CHARS + NONCE_BYTES
    with tempfile.TemporaryDirectory(prefix="popagent-bench-nonces-") as tmp:
        (Path(tmp) / "alone").mkdir()
        alone, _ = run_workers([before_rotation], per_worker, Path(tmp) / "alone")
        wall, outputs = run_workers(keyrings, per_worker, Path(tmp))
        pairs: set[bytes] = set()
        key_ids: set[bytes] = set()
        read = 0
        for output in outputs:
            data = output.read_bytes()
            if len(data) != per_worker * record:
                raise RuntimeError(f"{output.name}: {len(data)} bytes, expected {per_worker * record}")
            for offset in range(0, len(data), record):
                pair = data[offset : offset + record]
                pairs.add(pair)
                key_ids.add(pair[:KEY_ID_CHARS])
                read += 1
    duplicates = read - len(pairs)
    verdict = "ok" if duplicates == 0 and read == total else "MISSED"
    print(
        f"nonce uniqueness: {total:,} AES-256-GCM seals (Keyring.seal) in {args.processes} forked processes, "
        f"{len(key_ids)} key ids"
    )
    print(f"  duplicate (key id, nonce) pairs: {duplicates} of {read:,} (target 0: {verdict})")
    one_rate = per_worker / alone
    all_rate = total / wall
    print(
        f"  seals/s: {all_rate:,.0f} over {args.processes} processes, {one_rate:,.0f} one process alone "
        f"({all_rate / one_rate:.2f}x on {os.cpu_count()} cores)"
    )
    if verdict != "ok":
        sys.exit(1)


if __name__ == "__main__":
    main()
