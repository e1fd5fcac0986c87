"""Secrets latency: seal + store and resolve, against a bare insert / select of the same row.

    .venv/bin/python bench/secrets_store.py [--iterations 2000]

Uses DATABASE_URL when set (in a scratch database it creates and drops), else an embedded
PostgreSQL in a temporary folder. The store path is the service's own (`SecretStore`):
validation, AES-256-GCM, the per-key encryption counter, the upsert and the outbox event
in one transaction; resolve is one select plus decryption. The baseline writes and reads
a row of the same shape and size (key id, 12-byte nonce, ciphertext-sized bytes) in a
plain table of the same database. Operations are interleaved so load noise hits both
sides alike. Prints p50/p99 in microseconds and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from popagent_core.db import open_pool
from popagent_core.migrate import migrate
from popagent_secrets.crypto import Keyring
from popagent_secrets.service import MIGRATIONS
from popagent_secrets.store import SecretStore

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)

from bench.helpers.databases import scratch_database  # noqa: E402

RESOURCES = 10
NAMES = 50
VALUE = "Tr0ub4dor&3-correct-horse-battery-staple-" + "x" * 23  # 64 bytes, a long password
ORIGIN = "https://bench.example"

BARE_SCHEMA = """
CREATE TABLE bench_bare (
    resource_id text NOT NULL, name text NOT NULL, key_id text NOT NULL, nonce bytea NOT NULL,
    ciphertext bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (resource_id, name)
)
"""
BARE_UPSERT = """
INSERT INTO bench_bare (resource_id, name, key_id, nonce, ciphertext) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (resource_id, name) DO UPDATE
SET key_id = EXCLUDED.key_id, nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = now()
"""
BARE_SELECT = "SELECT key_id, nonce, ciphertext FROM bench_bare WHERE resource_id = $1 AND name = $2"


def key_of(i: int) -> tuple[str, str]:
    return f"bench-{i % RESOURCES}", f"secret-{(i // RESOURCES) % NAMES}"


async def timed(samples: list[float], call: Callable[[], Awaitable[object]]) -> None:
    start = time.perf_counter()
    await call()
    samples.append((time.perf_counter() - start) * 1e6)


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


async def bench(dsn: str, iterations: int) -> dict[str, list[float]]:
    await migrate(dsn, "secrets", MIGRATIONS)
    async with open_pool(dsn, "secrets", max_size=2) as pool:
        await pool.execute(BARE_SCHEMA)
        store = SecretStore(pool, Keyring(os.urandom(32)))
        sealed_size = len(store.keyring.seal(VALUE.encode(), "r", "n").ciphertext)
        for i in range(RESOURCES * NAMES):
            resource_id, name = key_of(i)
            await store.put(resource_id, name, VALUE)
            await store.bind(resource_id, name, ORIGIN)
            await pool.execute(BARE_UPSERT, resource_id, name, "0" * 16, os.urandom(12), os.urandom(sealed_size))

        async def bare_upsert(resource_id: str, name: str) -> None:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(BARE_UPSERT, resource_id, name, "0" * 16, os.urandom(12), os.urandom(sealed_size))

        samples: dict[str, list[float]] = {
            "seal+store (SecretStore.put)": [],
            "bare upsert, same row size": [],
            "resolve (SecretStore.resolve)": [],
            "bare select, same row": [],
            "seal only (AES-256-GCM)": [],
            "open only (AES-256-GCM)": [],
        }
        keys = list(samples)
        sealed = store.keyring.seal(VALUE.encode(), "r", "n")
        for i in range(iterations + 200):
            resource_id, name = key_of(i)
            round_samples: list[list[float]] = [[] for _ in keys]
            await timed(round_samples[0], lambda r=resource_id, n=name: store.put(r, n, VALUE))
            await timed(round_samples[1], lambda r=resource_id, n=name: bare_upsert(r, n))
            await timed(round_samples[2], lambda r=resource_id, n=name: store.resolve(r, n, ORIGIN))
            await timed(round_samples[3], lambda r=resource_id, n=name: pool.fetchrow(BARE_SELECT, r, n))
            start = time.perf_counter()
            store.keyring.seal(VALUE.encode(), "r", "n")
            round_samples[4].append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            store.keyring.open(sealed, "r", "n")
            round_samples[5].append((time.perf_counter() - start) * 1e6)
            if i >= 200:  # the first 200 rounds warm caches and the pool
                for key, values in zip(keys, round_samples, strict=True):
                    samples[key].extend(values)
        return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description="Secrets latency against a bare insert/select of the same row.")
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    async with scratch_database("secrets") as dsn:
        samples = await bench(dsn, args.iterations)
    print(f"secrets bench: {args.iterations} interleaved rounds, value {len(VALUE)} bytes, latency in µs")
    print(f"{'operation':<32}{'p50':>10}{'p99':>10}{'p50 vs bare':>14}")
    baselines = {
        "seal+store (SecretStore.put)": "bare upsert, same row size",
        "resolve (SecretStore.resolve)": "bare select, same row",
    }
    for name, values in samples.items():
        p50, p99 = quantiles(values)
        ratio = ""
        if name in baselines:
            ratio = f"{p50 / quantiles(samples[baselines[name]])[0]:.2f}x"
        print(f"{name:<32}{p50:>10.1f}{p99:>10.1f}{ratio:>14}")


if __name__ == "__main__":
    asyncio.run(main())
