"""The kernel's one list of services is what auth, subjects and default addresses use.

The launcher starting exactly these is tests/e2e/test_launcher.py; compose and the Dockerfile
agreeing with them is tests/deploy.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from popagent_core import subjects, topology
from popagent_core.credentials import generate_credentials
from popagent_gateway.settings import Settings as GatewaySettings

REPO_ROOT = Path(__file__).resolve().parents[2]
DSN = "postgresql://popagent@127.0.0.1:1/popagent"
_, CALLERS = generate_credentials(("gateway",))


def test_the_list_names_every_service_package_and_nothing_else() -> None:
    folders = {path.name for path in (REPO_ROOT / "services").iterdir() if (path / "pyproject.toml").is_file()}
    assert set(topology.SERVICE_NAMES) == folders
    assert len(set(topology.SERVICE_NAMES)) == len(topology.SERVICES)
    for service in topology.SERVICES:
        assert (REPO_ROOT / "services" / service.name / "src" / service.module / "__main__.py").is_file(), service


def test_grpc_ports_are_distinct_and_only_the_gateway_serves_none() -> None:
    ports = [service.grpc_port for service in topology.GRPC_SERVICES]
    assert len(set(ports)) == len(ports)
    assert [service.name for service in topology.SERVICES if service.grpc_port is None] == ["gateway"]
    assert topology.service_named("agent-runner").address_variable == "POPAGENT_AGENT_RUNNER_ADDR"
    with pytest.raises(ValueError, match="unknown service 'nope'"):
        topology.service_named("nope")


def test_credentials_cover_every_service_as_a_caller() -> None:
    tokens, digests = generate_credentials()
    assert sorted(tokens) == sorted(json.loads(digests)) == sorted(topology.SERVICE_NAMES)


def test_stream_owners_are_the_services_that_publish() -> None:
    owners = [service.subjects_owner for service in topology.SERVICES if service.subjects_owner]
    assert tuple(owners) == subjects.OWNERS
    for owner in owners:
        assert subjects.stream_name(owner) == f"POPAGENT_{owner.upper()}"
    with pytest.raises(ValueError, match="unknown subject owner"):
        subjects.stream_name("gateway")


@pytest.mark.parametrize("service", topology.GRPC_SERVICES, ids=lambda service: service.name)
def test_each_service_listens_on_its_listed_port_by_default(
    service: topology.Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_class = importlib.import_module(f"{service.module}.settings").Settings
    extra = {"POPAGENT_SECRET_KEY": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="} if service.name == "secrets" else {}
    settings = settings_class(DATABASE_URL=DSN, POPAGENT_INTERNAL_CALLERS=CALLERS, **extra)
    assert settings.grpc_address == f"127.0.0.1:{service.grpc_port}"
    monkeypatch.setenv(service.address_variable, "127.0.0.1:7999")
    assert settings_class(DATABASE_URL=DSN, POPAGENT_INTERNAL_CALLERS=CALLERS, **extra).grpc_address == "127.0.0.1:7999"


def test_the_gateway_dials_every_listed_service_at_its_default_port() -> None:
    stores: dict[str, Any] = {"DATABASE_URL": DSN, "OBSERVABILITY_DATABASE_URL": DSN}
    settings = GatewaySettings(**stores)
    assert settings.service_addresses() == {
        service.name: f"127.0.0.1:{service.grpc_port}" for service in topology.GRPC_SERVICES
    }
