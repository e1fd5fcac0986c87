"""What each `make run` process is given: the launcher's per-service environments and NATS users.

The stack itself is tests/e2e/test_launcher_isolation.py (every child's /proc environ, NATS
refusing a client without a user); here, the tables it is built from agree with the code.
"""

from __future__ import annotations

import importlib
import json
import re
import stat
from pathlib import Path

import pytest
from pydantic import AliasChoices

from popagent_core import subjects, topology
from popagent_core.bus import without_credentials
from popagent_dev import embedded
from popagent_dev.launcher import child_environment, inherited, nats_passwords

REPO_ROOT = Path(__file__).resolve().parents[2]


def aliases_of(service: str) -> set[str]:
    """Every environment variable the service's settings class reads."""
    settings_class = importlib.import_module(f"{topology.service_named(service).module}.settings").Settings
    found: set[str] = set()
    for field in settings_class.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            found |= {choice for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            found.add(alias)
    return found


@pytest.mark.parametrize("service", topology.SERVICE_NAMES)
def test_every_setting_a_service_reads_can_reach_it(service: str) -> None:
    """A setting named like a credential is passed only by the table: one the table forgot would
    silently never arrive, and the service would start without it."""
    unreachable = sorted(
        alias for alias in aliases_of(service) if not inherited(alias) and not topology.holds(service, alias)
    )
    assert unreachable == []


def test_credentials_reach_only_the_services_the_table_names() -> None:
    launcher_environment = {
        "PATH": "/usr/bin",
        "POPAGENT_LOG_LEVEL": "DEBUG",
        "OPENAI_API_KEY": "sk-not-in-the-table",
        "POPAGENT_SECRETS_ADDR": "127.0.0.1:1",
        "NINEROUTER_API_KEY": "from-the-user",
        "POPAGENT_SECRET_KEY": "from-the-user",
        "SOMETHING_ELSE": "x",
    }
    credentials = {"NINEROUTER_API_KEY": "model-key", "POPAGENT_SECRET_KEY": "aes-key", "POPAGENT_API_KEY": "api"}
    runner = child_environment("agent-runner", launcher_environment, {"POPAGENT_GATEWAY_PORT": "1"}, credentials)
    assert runner == {
        "PATH": "/usr/bin",
        "POPAGENT_LOG_LEVEL": "DEBUG",
        "POPAGENT_SECRETS_ADDR": "127.0.0.1:1",
        "POPAGENT_GATEWAY_PORT": "1",
        "NINEROUTER_API_KEY": "model-key",
    }
    secrets = child_environment("secrets", launcher_environment, {}, credentials)
    assert secrets["POPAGENT_SECRET_KEY"] == "aes-key"
    assert "NINEROUTER_API_KEY" not in secrets and "OPENAI_API_KEY" not in secrets
    assert child_environment("gateway", {}, {}, credentials) == {
        "NINEROUTER_API_KEY": "model-key",
        "POPAGENT_API_KEY": "api",
    }


def test_the_callers_table_names_real_services_and_every_grpc_service() -> None:
    assert set(topology.CALLERS) == {service.name for service in topology.GRPC_SERVICES}
    for service, callers in topology.CALLERS.items():
        assert callers <= set(topology.SERVICE_NAMES), service
        assert service not in callers, service
    assert topology.SECRET_VARIABLES["POPAGENT_INTERNAL_CALLERS"] == set(topology.CALLERS)


def _service_sources(service: str) -> str:
    return "\n".join(
        path.read_text() for path in (REPO_ROOT / "services" / service / "src").rglob("*.py") if "_pb2" not in path.name
    )


@pytest.mark.parametrize("service", topology.SERVICE_NAMES)
def test_the_nats_permissions_cover_what_each_service_subscribes_to(service: str) -> None:
    """Read from the code: each core subscription and each durable consumer of the service is in
    its user's permissions, and nothing more is."""
    source = _service_sources(service)
    subscribed = {getattr(subjects, name) for name in re.findall(r"subscribe\(\s*subjects\.([A-Z_]+)", source)}
    assert subscribed == set(embedded.NATS_LISTENS.get(service, ()))
    consumed = {getattr(subjects, name) for name in re.findall(r"subject=subjects\.([A-Z_]+)", source)}
    assert consumed == {subject for subject, _ in embedded.NATS_CONSUMERS.get(service, ())}


def test_the_nats_consumers_are_the_services_durables() -> None:
    from popagent_browser_bridge.service import SESSION_DELETED_DURABLE as BRIDGE_DURABLE
    from popagent_evolution.ingest import DURABLE as EVOLUTION_DURABLE
    from popagent_hooks.service import SESSION_DELETED_DURABLE

    assert embedded.NATS_CONSUMERS["hooks"] == ((subjects.SESSION_DELETED, SESSION_DELETED_DURABLE),)
    assert embedded.NATS_CONSUMERS["evolution"] == ((subjects.TURN_COMPLETED, EVOLUTION_DURABLE),)
    assert embedded.NATS_CONSUMERS["browser-bridge"] == ((subjects.SESSION_DELETED, BRIDGE_DURABLE),)


def test_a_service_publishes_only_its_own_facts() -> None:
    for service in topology.SERVICES:
        published = [
            subject for subject in embedded.nats_permissions(service)["publish"] if subject.startswith("popagent.")
        ]
        assert published == ([f"popagent.{service.subjects_owner}.>"] if service.subjects_owner else [])
        assert embedded.nats_permissions(service)["subscribe"][0] == f"_INBOX.{service.name}.>"


def test_nats_passwords_are_kept_private_and_stable(tmp_path: Path) -> None:
    first = nats_passwords(tmp_path)
    assert set(first) == set(topology.SERVICE_NAMES)
    assert len(set(first.values())) == len(first)
    assert stat.S_IMODE((tmp_path / "nats-passwords.json").stat().st_mode) == 0o600
    assert nats_passwords(tmp_path) == first
    # A service added since gets a password; the others keep theirs.
    kept = {name: password for name, password in first.items() if name != "hooks"}
    (tmp_path / "nats-passwords.json").write_text(json.dumps(kept))
    again = nats_passwords(tmp_path)
    assert {name: again[name] for name in kept} == kept and again["hooks"] != first["hooks"]
    assert stat.S_IMODE((tmp_path / "nats-passwords.json").stat().st_mode) == 0o600


def test_a_nats_url_is_said_without_its_password() -> None:
    url = "nats://agent-runner:s3cret@127.0.0.1:4222,nats://other:pw@10.0.0.1:4223"
    assert without_credentials(url) == "nats://127.0.0.1:4222,nats://10.0.0.1:4223"
    assert without_credentials("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
