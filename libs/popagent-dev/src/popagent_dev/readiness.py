"""The launcher's readiness probe: waits for gRPC servers to report SERVING.

    python -m popagent_dev.readiness ADDRESS [ADDRESS ...]

Prints `ready ADDRESS` once per address as each one's standard health service answers SERVING,
and exits 0 when all have. It never gives up on its own: the launcher, which knows its deadline
and whether the service is still alive, stops it. A process of its own so that the launcher, which
stays up for as long as the stack does, never loads gRPC (about 20 MB of resident memory).
"""

from __future__ import annotations

import asyncio
import sys

from popagent_core.grpc_client import check_health, open_channel

POLL_INTERVAL_S = 0.05


async def wait_ready(address: str) -> None:
    async with open_channel(address, "") as channel:
        while not await check_health(channel, timeout_s=0.5):  # noqa: ASYNC110 (a remote server: nothing to wait on but asking again)
            await asyncio.sleep(POLL_INTERVAL_S)
    sys.stdout.write(f"ready {address}\n")
    sys.stdout.flush()


async def main(addresses: list[str]) -> None:
    await asyncio.gather(*(wait_ready(address) for address in dict.fromkeys(addresses)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -m popagent_dev.readiness ADDRESS [ADDRESS ...]\n")
        raise SystemExit(2)
    asyncio.run(main(sys.argv[1:]))
