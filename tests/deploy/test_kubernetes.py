"""deploy/kubernetes: both overlays render with kubectl's kustomize, every manifest is valid for
Kubernetes 1.30 and 1.37, and what matters holds in what a user would apply: limits and probes
everywhere, nothing privileged (agent-runner's sandbox needs spelled out and no more), credentials
only in Secrets and each process given only its own (popagent_core.topology, the settings classes),
NetworkPolicies for every workload that admit each service's callers only, NATS a JetStream cluster
of 3 with streams of 3, and the migrations a Job the services wait for."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from popagent_core import topology
from popagent_core.auth import CallerRegistry
from popagent_core.errors import Unauthenticated

from .harness import (
    DEPLOY,
    KUBERNETES,
    OVERLAYS,
    PRODUCTION_DATABASE_URL,
    PRODUCTION_OBSERVABILITY_URL,
    REPO_ROOT,
    Rendered,
    containers,
    make_env_kubernetes,
    pod_spec,
    render,
)

# The oldest and the newest Kubernetes the manifests are checked against (appArmorProfile is 1.30+).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
GRPC_SERVICES = {service.name: service for service in topology.GRPC_SERVICES}
IMAGE = "popagent:latest"
SANDBOX_PROFILE = "popagent/agent-runner.json"
# What NetworkPolicies allow between pods of these names (and what stands in for "any address").
ANYWHERE = "*"


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    return render(request.param, tmp_path_factory.mktemp(request.param))


def workload(rendered: Rendered, name: str) -> dict[str, Any]:
    for item in rendered.workloads():
        if item["metadata"]["name"] == name:
            return item
    raise KeyError(name)


def main_container(rendered: Rendered, name: str) -> dict[str, Any]:
    return pod_spec(workload(rendered, name))["containers"][0]


# ---- schemas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_follows_the_kubernetes_schema(rendered: Rendered, version: str) -> None:
    errors = []
    for item in rendered.objects:
        try:
            kubernetes_validate.validate(item, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            errors.append(f"{item['kind']}/{item['metadata']['name']}: {error}")
    assert errors == []
    # Strict: a misspelt field is an error, not ignored.
    broken = json.loads(json.dumps(workload(rendered, "hooks")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"grpc": {"port": 50152}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


# ---- the services ----------------------------------------------------------------------------


def test_every_service_runs_its_own_module_from_the_one_image(rendered: Rendered) -> None:
    for service in topology.SERVICES:
        deployment = workload(rendered, service.name)
        assert deployment["kind"] == "Deployment"
        container = main_container(rendered, service.name)
        assert container["command"] == ["python", "-m", service.module]
        assert container["image"] == IMAGE
    popagent_images = {
        container["image"]
        for item in rendered.workloads()
        for container in containers(item)
        if container["image"].startswith("popagent")
    }
    assert popagent_images == {IMAGE}
    # The image's user owns what the pods mount and write (deploy/Dockerfile).
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    for service in topology.SERVICES:
        security = pod_spec(workload(rendered, service.name))["securityContext"]
        assert (security["runAsUser"], security["runAsGroup"]) == (10001, 10001)


def test_every_container_has_requests_limits_and_probes(rendered: Rendered) -> None:
    for item in rendered.workloads():
        for container in containers(item):
            where = f"{item['metadata']['name']}/{container['name']}"
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert set(resources.get(bound, {})) >= {"cpu", "memory"}, f"{where}: {bound}"
        if item["kind"] == "Job":
            continue
        for container in pod_spec(item)["containers"]:
            where = f"{item['metadata']['name']}/{container['name']}"
            assert "readinessProbe" in container, where
            assert "livenessProbe" in container, where


def test_grpc_services_are_probed_on_grpc_health_and_the_gateway_on_api_health(rendered: Rendered) -> None:
    for name, service in GRPC_SERVICES.items():
        container = main_container(rendered, name)
        env = {entry["name"]: entry.get("value") for entry in container.get("env", [])}
        # It listens where it is probed and where its Service sends.
        assert env[service.address_variable] == f"0.0.0.0:{service.grpc_port}", name
        assert [port["containerPort"] for port in container["ports"]] == [service.grpc_port]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": service.grpc_port}, (name, probe)
        (port,) = rendered.named("Service", name)["spec"]["ports"]
        assert (port["port"], port["targetPort"]) == (service.grpc_port, "grpc")
        assert rendered.named("Service", name)["spec"]["selector"] == {"app.kubernetes.io/name": name}
        # The other services dial the Service.
        assert rendered.config_data("popagent-config")[service.address_variable] == f"{name}:{service.grpc_port}"
    gateway = main_container(rendered, "gateway")
    script, url = gateway["readinessProbe"]["exec"]["command"][2:]
    assert gateway["readinessProbe"]["exec"]["command"][:2] == ["python", "-c"]
    assert url == "http://127.0.0.1:8080/api/health"
    # The very probe compose runs (tests/deploy/test_compose.py runs it against a server: key sent, 200 needed).
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert script == compose["services"]["gateway"]["healthcheck"]["test"][3]
    # A failing dependency makes a gateway unready, never restarts it.
    assert gateway["livenessProbe"] == {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "failureThreshold": 3}


def test_the_tasks_workers_run_attempts_in_agent_runner_as_make_run_does(rendered: Rendered) -> None:
    """Without an executor a tasks process takes and schedules tasks but runs none of them."""
    env = {entry["name"]: entry.get("value") for entry in main_container(rendered, "tasks")["env"]}
    executor = env["POPAGENT_TASKS_EXECUTOR"]
    assert f'"{executor}"' in (REPO_ROOT / "libs/popagent-dev/src/popagent_dev/launcher.py").read_text()
    module, _, attribute = executor.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


def test_every_workload_has_a_disruption_budget_and_the_two_busy_tiers_scale(rendered: Rendered) -> None:
    budgets = rendered.of_kind("PodDisruptionBudget")
    for item in rendered.workloads():
        if item["kind"] == "Job":
            continue
        labels = item["spec"]["template"]["metadata"]["labels"]
        matching = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(matching) == 1, item["metadata"]["name"]
        assert matching[0]["spec"] == {"maxUnavailable": 1, "selector": matching[0]["spec"]["selector"]}
    scaled = {hpa["spec"]["scaleTargetRef"]["name"]: hpa["spec"] for hpa in rendered.of_kind("HorizontalPodAutoscaler")}
    assert set(scaled) == {"gateway", "agent-runner"}
    for name, spec in scaled.items():
        assert workload(rendered, name)["kind"] == spec["scaleTargetRef"]["kind"] == "Deployment"
        assert spec["minReplicas"] <= spec["maxReplicas"]
        # CPU utilisation is measured against the request, which therefore must be there.
        assert main_container(rendered, name)["resources"]["requests"]["cpu"]


def test_the_runner_container_has_room_for_a_sandboxed_command(rendered: Rendered) -> None:
    sandbox_mb = int(rendered.config_data("popagent-config")["POPAGENT_SANDBOX_MEMORY_MB"])
    limit = main_container(rendered, "agent-runner")["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    assert int(limit[:-2]) * 1024 >= sandbox_mb + 1024, "a command at its limit and the runner itself must fit"


# ---- security --------------------------------------------------------------------------------


def test_no_container_is_privileged_and_only_agent_runner_has_the_sandbox_exceptions(rendered: Rendered) -> None:
    for item in rendered.workloads():
        name = item["metadata"]["name"]
        spec = pod_spec(item)
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(host), (name, host)
        assert all("hostPath" not in volume for volume in spec.get("volumes", [])), name
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in containers(item):
            security = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert security["privileged"] is False, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            assert "runAsUser" not in security or security["runAsUser"] != 0, where
            exceptions = {key: security[key] for key in ("seccompProfile", "appArmorProfile") if key in security}
            if (name, container["name"]) == ("agent-runner", "agent-runner"):
                assert exceptions == {
                    "seccompProfile": {"type": "Localhost", "localhostProfile": SANDBOX_PROFILE},
                    "appArmorProfile": {"type": "Unconfined"},
                }
            else:
                assert exceptions == {}, where


def test_the_sandbox_profile_is_the_compose_one_and_still_refuses_escapes() -> None:
    """The Localhost profile the nodes get is deploy/seccomp-agent-runner.json (docs say how)."""
    profile = json.loads((DEPLOY / "seccomp-agent-runner.json").read_text())
    refused = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" for name in rule["names"]}
    assert {"bpf", "kexec_load", "init_module", "ptrace", "open_by_handle_at", "userfaultfd"} <= refused
    assert not {"unshare", "clone", "mount", "pivot_root"} & refused, "bubblewrap needs these"
    guide = (REPO_ROOT / "docs" / "deploy-kubernetes.md").read_text()
    assert f"seccomp/{SANDBOX_PROFILE}" in guide and "deploy/seccomp-agent-runner.json" in guide


def secret_values(rendered: Rendered) -> set[str]:
    return {
        value
        for secret in rendered.of_kind("Secret")
        for value in rendered.secret_data(secret["metadata"]["name"]).values()
        if len(value) >= 16
    }


def test_credentials_are_never_in_a_configmap_or_a_spec(rendered: Rendered) -> None:
    values = secret_values(rendered)
    assert len(values) > 20
    for item in rendered.objects:
        if item["kind"] == "Secret":
            continue
        text = json.dumps(item)
        where = f"{item['kind']}/{item['metadata']['name']}"
        assert not [value for value in values if value in text], f"{where} holds a credential"
        # Nor the password inside a database or NATS URL.
        assert not re.search(r"(postgres(ql)?|nats)://[^/\s\"@]*:[^/\s\"@]+@", text), where
    for config_map in rendered.of_kind("ConfigMap"):
        for key in config_map.get("data", {}):
            assert key not in topology.SECRET_VARIABLES, key
            assert not topology.CREDENTIAL_NAME.search(key), key
    # The NATS users' passwords are read from the server's environment, never written in its file.
    authorization = rendered.config_data("nats")["authorization.conf"]
    assert sorted(re.findall(r"password: (\S+)", authorization)) == sorted(
        f"$NATS_PASSWORD_{name.upper().replace('-', '_')}" for name in topology.SERVICE_NAMES
    )


def secrets_used(item: dict[str, Any]) -> set[str]:
    names = set()
    for container in containers(item):
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                names.add(source["secretRef"]["name"])
        for entry in container.get("env", []):
            reference = entry.get("valueFrom", {}).get("secretKeyRef")
            if reference:
                names.add(reference["name"])
    for volume in pod_spec(item).get("volumes", []):
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
    return {name.rpartition("-")[0] for name in names}


def test_each_process_gets_only_the_secret_keys_the_table_gives_it(rendered: Rendered) -> None:
    """One Secret per process, with exactly what popagent_core.topology.SECRET_VARIABLES gives it."""
    for service in topology.SERVICE_NAMES:
        assert secrets_used(workload(rendered, service)) == {f"popagent-{service}"}, service
        held = {variable for variable, holders in topology.SECRET_VARIABLES.items() if service in holders}
        assert set(rendered.secret_data(f"popagent-{service}")) == held, service
    assert secrets_used(workload(rendered, "migrate")) == {"popagent-migrate"}
    assert set(rendered.secret_data("popagent-migrate")) == {"DATABASE_URL", "OBSERVABILITY_DATABASE_URL"}
    assert secrets_used(workload(rendered, "nats")) == {"popagent-nats"}
    assert set(rendered.secret_data("popagent-nats")) == {
        f"NATS_PASSWORD_{name.upper().replace('-', '_')}" for name in topology.SERVICE_NAMES
    }
    assert secrets_used(workload(rendered, "searxng")) == {"popagent-searxng"}
    assert secrets_used(workload(rendered, "proxy")) == set()
    if rendered.overlay == "single-node":
        assert secrets_used(workload(rendered, "postgres")) == {"popagent-postgres"}
        assert set(rendered.secret_data("popagent-postgres")) == {"POSTGRES_PASSWORD"}
    # The keys of the secrets store and the API key: one process each.
    holders = {
        variable: {
            s["metadata"]["name"].rpartition("-")[0] for s in rendered.of_kind("Secret") if variable in s["data"]
        }
        for variable in ("POPAGENT_SECRET_KEY", "POPAGENT_API_KEY", "POPAGENT_HOOKS")
    }
    assert holders == {
        "POPAGENT_SECRET_KEY": {"popagent-secrets"},
        "POPAGENT_API_KEY": {"popagent-gateway"},
        "POPAGENT_HOOKS": {"popagent-hooks"},
    }


def container_environment(rendered: Rendered, name: str) -> dict[str, str]:
    """The environment the service's container starts with (envFrom, then env over it)."""
    container = main_container(rendered, name)
    env: dict[str, str] = {}
    for source in container["envFrom"]:
        if "configMapRef" in source:
            env.update(rendered.config_data(source["configMapRef"]["name"].rpartition("-")[0]))
        else:
            env.update(rendered.secret_data(source["secretRef"]["name"].rpartition("-")[0]))
    pod_ip = "10.1.2.3"
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"].replace("$(POD_IP)", pod_ip)
        elif entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[entry["name"]] = pod_ip
    return env


@pytest.mark.parametrize("name", topology.SERVICE_NAMES)
def test_each_container_environment_satisfies_its_service_settings(
    rendered: Rendered, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith(("POPAGENT_", "NINEROUTER_", "NATS_", "OTEL_")) or key.endswith("_URL"):
            monkeypatch.delenv(key)
    env = container_environment(rendered, name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = importlib.import_module(f"{topology.service_named(name).module}.settings").Settings()
    assert settings.nats_stream_replicas == 3
    expected_database = PRODUCTION_DATABASE_URL if rendered.overlay == "production" else None
    if expected_database:
        assert settings.database_url == expected_database
        assert settings.observability_database_url == PRODUCTION_OBSERVABILITY_URL
    else:
        assert urlsplit(settings.database_url).hostname == "postgres"
    # Its own NATS user, on every server of the cluster.
    urls = [urlsplit(url) for url in env["NATS_URL"].split(",")]
    assert [url.hostname for url in urls] == [f"nats-{n}.nats-headless" for n in range(3)]
    assert {url.username for url in urls} == {name}
    password_variable = f"NATS_PASSWORD_{name.upper().replace('-', '_')}"
    assert {url.password for url in urls} == {rendered.secret_data("popagent-nats")[password_variable]}
    if name == "gateway":
        assert (settings.host, settings.port) == ("0.0.0.0", 8080)
        assert settings.service_addresses() == {s: f"{s}:{GRPC_SERVICES[s].grpc_port}" for s in GRPC_SERVICES}
    else:
        assert settings.grpc_address == f"0.0.0.0:{GRPC_SERVICES[name].grpc_port}"
        assert settings.internal_token.startswith(f"{name}.")
    if name == "agent-runner":
        # Gateways dial the pod itself, not the Service.
        assert settings.advertise_address == "10.1.2.3:50151"


def test_each_service_accepts_the_tokens_of_its_callers_only(rendered: Rendered) -> None:
    tokens = {
        name: rendered.secret_data(f"popagent-{name}")["POPAGENT_INTERNAL_TOKEN"] for name in topology.SERVICE_NAMES
    }
    assert len(set(tokens.values())) == len(tokens)
    for name in GRPC_SERVICES:
        registry = CallerRegistry.from_json(rendered.secret_data(f"popagent-{name}")["POPAGENT_INTERNAL_CALLERS"])
        for caller, token in tokens.items():
            if caller in topology.CALLERS[name]:
                assert registry.authenticate(token) == caller
            else:
                with pytest.raises(Unauthenticated):
                    registry.authenticate(token)


# ---- network policies -------------------------------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if selector.get("matchLabels", {}).items() - labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def peer_names(peers: list[dict[str, Any]] | None, workloads: dict[str, dict[str, str]]) -> set[str]:
    """The workloads of this namespace a rule's peers cover (ANYWHERE for no peer list, an address
    block or another namespace)."""
    if not peers:
        return {ANYWHERE}
    names: set[str] = set()
    for peer in peers:
        if "ipBlock" in peer or "namespaceSelector" in peer:
            names.add(ANYWHERE)
            continue
        names |= {name for name, labels in workloads.items() if selects(peer["podSelector"], labels)}
    return names


def allowed(rendered: Rendered, direction: str) -> dict[str, set[tuple[str, int | None]]]:
    """For each workload, the (peer, port) pairs its policies allow in `direction` (ingress/egress)."""
    workloads = {
        item["metadata"]["name"]: item["spec"]["template"]["metadata"]["labels"] for item in rendered.workloads()
    }
    result: dict[str, set[tuple[str, int | None]]] = {name: set() for name in workloads}
    for policy in rendered.of_kind("NetworkPolicy"):
        spec = policy["spec"]
        for name, labels in workloads.items():
            if not selects(spec["podSelector"], labels):
                continue
            for rule in spec.get(direction, []):
                peers = peer_names(rule.get("from" if direction == "ingress" else "to"), workloads)
                ports = [port["port"] for port in rule.get("ports", [])] or [None]
                result[name] |= {(peer, port) for peer in peers for port in ports}
    return result


def test_everything_is_denied_unless_a_policy_allows_it(rendered: Rendered) -> None:
    deny = rendered.named("NetworkPolicy", "default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}
    egress = allowed(rendered, "egress")
    for name, pairs in egress.items():
        assert (ANYWHERE, 53) in pairs, f"{name} cannot resolve names"


def test_each_service_accepts_only_its_callers_and_only_the_edge_is_reachable_from_outside(rendered: Rendered) -> None:
    ingress = allowed(rendered, "ingress")
    egress = allowed(rendered, "egress")
    reachable_from_anywhere = {name for name, pairs in ingress.items() if any(peer == ANYWHERE for peer, _ in pairs)}
    assert reachable_from_anywhere == {"proxy"}
    assert ingress["proxy"] == {(ANYWHERE, 8080)}
    assert ingress["gateway"] == {("proxy", 8080)}
    assert egress["proxy"] >= {("gateway", 8080)}
    for name, service in GRPC_SERVICES.items():
        assert ingress[name] == {(caller, service.grpc_port) for caller in topology.CALLERS[name]}, name
        for caller in topology.CALLERS[name]:
            assert (name, service.grpc_port) in egress[caller], f"{caller} cannot reach {name}"
    callees = {caller: {s for s in GRPC_SERVICES if caller in topology.CALLERS[s]} for caller in topology.SERVICE_NAMES}
    for caller, pairs in egress.items():
        reached = {peer for peer, port in pairs if peer in GRPC_SERVICES}
        assert reached == callees.get(caller, set()), caller
    # Each service reaches NATS; only NATS servers reach each other's routes.
    for name in topology.SERVICE_NAMES:
        assert (("nats", 4222)) in egress[name]
    assert ingress["nats"] == {*((name, 4222) for name in topology.SERVICE_NAMES), ("nats", 6222)}
    # agent-runner may reach SearXNG and the model gateway; SearXNG accepts it alone.
    assert ("searxng", 8080) in egress["agent-runner"]
    assert ingress["searxng"] == {("agent-runner", 8080)}
    for name in ("gateway", "agent-runner", "evolution"):
        assert (ANYWHERE, 443) in egress[name], name
    for name in ("tasks", "secrets", "browser-bridge", "nats", "proxy", "migrate"):
        assert not {port for peer, port in egress[name] if peer == ANYWHERE} - {53, 5432}, name
    if rendered.overlay == "single-node":
        assert ingress["postgres"] == {(name, 5432) for name in (*topology.SERVICE_NAMES, "migrate")}
        assert egress["postgres"] == {(ANYWHERE, 53)}


# ---- NATS -------------------------------------------------------------------------------------


def test_nats_is_a_jetstream_cluster_of_three_with_streams_of_three(rendered: Rendered) -> None:
    nats = workload(rendered, "nats")
    assert nats["kind"] == "StatefulSet"
    assert nats["spec"]["replicas"] == 3
    config = rendered.config_data("nats")["nats.conf"]
    headless = nats["spec"]["serviceName"]
    assert rendered.named("Service", headless)["spec"]["clusterIP"] == "None"
    routes = re.findall(r"nats://(\S+):6222", config)
    assert routes == [f"nats-{n}.{headless}" for n in range(3)]
    assert "jetstream {" in config and "store_dir: /data" in config
    assert "include ./authorization.conf" in config
    # The users are make run's and compose's.
    assert rendered.config_data("nats")["authorization.conf"] == (DEPLOY / "nats" / "nats.conf").read_text()
    assert int(rendered.config_data("popagent-config")["POPAGENT_NATS_STREAM_REPLICAS"]) == 3
    mounts = {mount["mountPath"] for mount in main_container(rendered, "nats")["volumeMounts"]}
    assert "/data" in mounts
    assert [claim["metadata"]["name"] for claim in nats["spec"]["volumeClaimTemplates"]] == ["data"]
    if rendered.overlay == "production":
        anti = pod_spec(nats)["affinity"]["podAntiAffinity"]
        assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"


def test_the_nats_cluster_configuration_is_accepted_by_nats_server(rendered: Rendered, tmp_path: Path) -> None:
    from popagent_dev.embedded import nats_server_binary

    for file, text in rendered.config_data("nats").items():
        (tmp_path / file).write_text(text.replace("/data", str(tmp_path / "data")))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "POD_NAME": "nats-0",
        **rendered.secret_data("popagent-nats"),
    }
    result = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(tmp_path / "nats.conf")],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---- migrations, PostgreSQL, the edge ----------------------------------------------------------


def test_the_migrations_run_as_a_job_the_services_wait_for(rendered: Rendered) -> None:
    job = workload(rendered, "migrate")
    assert job["kind"] == "Job"
    (container,) = pod_spec(job)["containers"]
    assert container["command"] == ["python", "-m", "popagent_core.migrate_all"]
    for name in topology.SERVICE_NAMES:
        (wait,) = pod_spec(workload(rendered, name))["initContainers"]
        assert wait["image"] == container["image"]
        assert wait["command"][:4] == ["python", "-m", "popagent_core.migrate_all", "--wait"]
        assert {entry["name"] for entry in wait["env"]} == {"DATABASE_URL", "OBSERVABILITY_DATABASE_URL"}


def test_postgresql_by_url_and_a_server_of_its_own_only_on_one_node(rendered: Rendered) -> None:
    migrate = rendered.secret_data("popagent-migrate")
    if rendered.overlay == "production":
        assert not rendered.has("StatefulSet", "postgres")
        assert migrate == {
            "DATABASE_URL": PRODUCTION_DATABASE_URL,
            "OBSERVABILITY_DATABASE_URL": PRODUCTION_OBSERVABILITY_URL,
        }
        return
    postgres = workload(rendered, "postgres")
    env = {entry["name"]: entry.get("value") for entry in main_container(rendered, "postgres")["env"]}
    password = rendered.secret_data("popagent-postgres")["POSTGRES_PASSWORD"]
    for variable, database in (("DATABASE_URL", env["POSTGRES_DB"]), ("OBSERVABILITY_DATABASE_URL", None)):
        url = urlsplit(migrate[variable])
        assert (url.hostname, url.port, url.username, url.password) == (
            "postgres",
            5432,
            env["POSTGRES_USER"],
            password,
        )
        if database:
            assert url.path == f"/{database}"
        else:
            init = rendered.config_data("postgres-init")
            assert f"CREATE DATABASE {url.path[1:]} OWNER {env['POSTGRES_USER']};" in init.values()
    assert postgres["spec"]["replicas"] == 1


def haproxy_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = sections.setdefault(line.strip(), [])
        else:
            current.append(" ".join(line.split()))
    return sections


def test_the_edge_is_compose_haproxy_with_the_cluster_resolver(rendered: Rendered, tmp_path: Path) -> None:
    kubernetes = haproxy_sections(rendered.config_data("proxy")["haproxy.cfg"])
    compose = haproxy_sections((DEPLOY / "haproxy" / "haproxy.cfg").read_text())
    for section in ("global", "defaults", "frontend popagent"):
        assert kubernetes[section] == compose[section], section
    assert kubernetes["resolvers cluster"][0] == "parse-resolv-conf"
    assert any(line.startswith("server gateway gateway:8080 ") for line in kubernetes["backend gateway"])
    assert ("Service", "proxy") in {(item["kind"], item["metadata"]["name"]) for item in rendered.objects}
    service_type = rendered.named("Service", "proxy")["spec"].get("type", "ClusterIP")
    assert service_type == ("LoadBalancer" if rendered.overlay == "production" else "ClusterIP")
    exposed = {item["metadata"]["name"] for item in rendered.of_kind("Service") if item["spec"].get("type")}
    assert exposed <= {"proxy"}
    if shutil.which("haproxy"):
        config = tmp_path / "haproxy.cfg"
        config.write_text(rendered.config_data("proxy")["haproxy.cfg"])
        result = subprocess.run(
            ["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_searxng_gets_the_compose_settings(rendered: Rendered) -> None:
    data = rendered.config_data("searxng")
    for file in ("settings.yml", "limiter.toml"):
        assert data[file] == (DEPLOY / "searxng" / file).read_text()
    assert rendered.config_data("popagent-config")["SEARXNG_URL"] == "http://searxng:8080"


def test_the_workspace_volume_is_where_the_image_keeps_workspaces(rendered: Rendered) -> None:
    mounts = {mount["name"]: mount["mountPath"] for mount in main_container(rendered, "agent-runner")["volumeMounts"]}
    assert "POPAGENT_WORKSPACE_ROOT=/var/lib/popagent/workspace" in (DEPLOY / "Dockerfile").read_text()
    assert mounts["workspace"] == "/var/lib/popagent/workspace"
    claim = rendered.named("PersistentVolumeClaim", "workspace")["spec"]["accessModes"]
    assert claim == (["ReadWriteMany"] if rendered.overlay == "production" else ["ReadWriteOnce"])


# ---- make-env.py kubernetes ----------------------------------------------------------------------


def test_make_env_never_overwrites_a_secret_key(tmp_path: Path) -> None:
    assert make_env_kubernetes(tmp_path).returncode == 0
    key = (tmp_path / "secrets.env").read_text()
    assert oct((tmp_path / "secrets.env").stat().st_mode & 0o777) == "0o600"
    again = make_env_kubernetes(tmp_path)
    assert again.returncode != 0
    assert "secrets.env" in again.stderr and "nothing was written" in again.stderr
    assert (tmp_path / "secrets.env").read_text() == key


def test_make_env_needs_both_database_urls_or_neither(tmp_path: Path) -> None:
    result = make_env_kubernetes(tmp_path, "--database-url", PRODUCTION_DATABASE_URL)
    assert result.returncode != 0 and "both" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_overlay_secrets_stay_out_of_git() -> None:
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for overlay in OVERLAYS:
        path = KUBERNETES.relative_to(REPO_ROOT) / "overlays" / overlay / "secrets" / "gateway.env"
        result = subprocess.run(
            ["git", "check-ignore", "-q", str(path)], cwd=REPO_ROOT, capture_output=True, timeout=30, check=False
        )
        assert result.returncode == 0, f"{path} would be committed"
