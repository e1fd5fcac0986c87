"""A real Matrix homeserver for the channel tests: Synapse (`matrix-synapse`, installed by `make setup`
into .venv-synapse/, pinned by constraints-synapse.txt) on a free loopback port, SQLite, a generated
config with federation off, users registered through the shared-secret admin API; and a Matrix user
driving it through the client-server API (`MatrixUser`), as a person's client would.

Synapse issues a user's access token itself and has no API to choose one (an application service's
`as_token` is the only chosen token it accepts, and it refuses /sync to that user). A user whose token
the test chooses, to hold the suite's canary (support/canary.py), gets it written over the issued one
in the homeserver's own SQLite store (`register(name, token=...)`)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import sqlite3
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from popagent_dev.embedded import free_port

REPO = Path(__file__).resolve().parents[2]
SYNAPSE_PYTHON = REPO / ".venv-synapse" / "bin" / "python"
SERVER_NAME = "localhost"
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Homeserver:
    url: str
    shared_secret: str
    database: Path

    def register(self, name: str, *, token: str = "") -> MatrixUser:
        """A user registered with the shared secret (Synapse's admin API), logged in: its access token,
        or `token` when given (it replaces the issued one before anything has used it)."""
        with httpx.Client(base_url=self.url, timeout=30) as client:
            nonce = client.get("/_synapse/admin/v1/register").json()["nonce"]
            password = uuid.uuid4().hex
            mac = hmac.new(
                self.shared_secret.encode(),
                b"\x00".join([nonce.encode(), name.encode(), password.encode(), b"notadmin"]),
                hashlib.sha1,
            ).hexdigest()
            answer = client.post(
                "/_synapse/admin/v1/register",
                json={"nonce": nonce, "username": name, "password": password, "admin": False, "mac": mac},
            )
            answer.raise_for_status()
            body = answer.json()
        if not token:
            return MatrixUser(self.url, body["user_id"], body["access_token"])
        with contextlib.closing(sqlite3.connect(self.database, timeout=30)) as store, store:
            changed = store.execute(
                "UPDATE access_tokens SET token = ? WHERE token = ?", (token, body["access_token"])
            ).rowcount
        assert changed == 1, "the issued access token was not found in Synapse's store"
        return MatrixUser(self.url, body["user_id"], token)


def _config(folder: Path, port: int, shared_secret: str) -> str:
    return f"""
server_name: "{SERVER_NAME}"
pid_file: {folder}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: {folder}/homeserver.db
media_store_path: {folder}/media
signing_key_path: {folder}/signing.key
log_config: {folder}/log.yaml
registration_shared_secret: "{shared_secret}"
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
enable_metrics: false
rc_message: {{per_second: 1000, burst_count: 1000}}
rc_joins: {{local: {{per_second: 1000, burst_count: 1000}}}}
rc_login: {{address: {{per_second: 1000, burst_count: 1000}}, account: {{per_second: 1000, burst_count: 1000}}}}
"""


_LOG = """
version: 1
formatters:
  plain: {format: "%(asctime)s %(name)s %(levelname)s %(message)s"}
handlers:
  file: {class: logging.FileHandler, filename: "FOLDER/homeserver.log", formatter: plain}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


@contextlib.contextmanager
def synapse(folder: Path) -> Iterator[Homeserver]:
    """Synapse started in `folder`, answering the client-server API; stopped on exit."""
    if not SYNAPSE_PYTHON.exists():
        raise RuntimeError(".venv-synapse is missing: run `make setup`")
    port = free_port()
    shared_secret = uuid.uuid4().hex
    config = folder / "homeserver.yaml"
    config.write_text(_config(folder, port, shared_secret))
    (folder / "log.yaml").write_text(_LOG.replace("FOLDER", str(folder)))
    subprocess.run(
        [str(SYNAPSE_PYTHON), "-m", "synapse.app.homeserver", "-c", str(config), "--generate-keys"],
        check=True,
        capture_output=True,
        cwd=folder,
    )
    output = (folder / "stdout.log").open("w")
    process = subprocess.Popen(
        [str(SYNAPSE_PYTHON), "-m", "synapse.app.homeserver", "-c", str(config)],
        stdout=output,
        stderr=subprocess.STDOUT,
        cwd=folder,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = httpx.Client(base_url=url, timeout=2)
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"Synapse exited: {(folder / 'stdout.log').read_text()[-2000:]}")
            try:
                if probe.get("/_matrix/client/versions").status_code == 200:
                    probe.close()
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("Synapse did not answer in time")
            time.sleep(0.2)
        yield Homeserver(url, shared_secret, folder / "homeserver.db")
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()


def _quoted(part: str) -> str:
    return urllib.parse.quote(part, safe="")


@dataclass(frozen=True)
class MatrixUser:
    """A Matrix account used as a person's client would: rooms, messages, threads, reactions."""

    url: str
    user_id: str
    token: str

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url + "/_matrix/client/", headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        async with self._client() as client:
            answer = await client.request(method, path, json=body)
        assert answer.status_code == 200, f"{method} {path}: {answer.status_code} {answer.text}"
        return dict(answer.json())

    async def create_room(self, invite: list[str]) -> str:
        return str((await self._call("POST", "v3/createRoom", {"invite": invite, "preset": "private_chat"}))["room_id"])

    async def join(self, room: str) -> None:
        await self._call("POST", f"v3/join/{_quoted(room)}", {})

    async def send(self, room: str, content: dict[str, Any], kind: str = "m.room.message") -> str:
        path = f"v3/rooms/{_quoted(room)}/send/{kind}/{uuid.uuid4().hex}"
        return str((await self._call("PUT", path, content))["event_id"])

    async def say(self, room: str, text: str, *, thread: str = "") -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if thread:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        return await self.send(room, content)

    async def react(self, room: str, event_id: str, key: str) -> str:
        relation = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self.send(room, relation, "m.reaction")

    async def members(self, room: str) -> list[str]:
        return list((await self._call("GET", f"v3/rooms/{_quoted(room)}/joined_members"))["joined"])

    async def events(self, room: str) -> list[dict[str, Any]]:
        """The room's timeline, oldest first (redacted events keep their place, content emptied)."""
        answer = await self._call("GET", f"v3/rooms/{_quoted(room)}/messages?dir=b&limit=500")
        return list(reversed(answer["chunk"]))
