"""deploy/kubernetes: rendered by ``kubectl kustomize`` (Debian's kubernetes-client in CI),
every object valid against the Kubernetes API's schemas (kubernetes-validate, offline),
and every pod's environment a valid ``Settings`` of this service."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.settings import VARIABLES, Settings, SettingsError
from tests.helpers import repo_root

MANIFESTS = repo_root() / "deploy" / "kubernetes"
KUBERNETES = "1.30.0"  # the oldest minor still supported upstream as this was written


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl (Debian's kubernetes-client) is needed: .ci/run"
    out = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(rendered: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in rendered if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_every_object_is_valid_kubernetes(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered)
    assert kinds == [
        "ConfigMap/mneme", "Deployment/mneme-api", "Deployment/mneme-worker",
        "Job/mneme-migrate", "PodDisruptionBudget/mneme-api", "Secret/mneme", "Service/mneme",
    ]  # fmt: skip
    for doc in rendered:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises if invalid


def test_an_invalid_object_is_caught() -> None:
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replicas": "two"}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES, strict=True)


def pod_env(rendered: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the pod would see it: its env, and the ConfigMap's
    and Secret's keys it takes in."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(by_kind(rendered, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            secret = by_kind(rendered, "Secret", source["secretRef"]["name"])
            env.update(secret["stringData"])
    env.update({e["name"]: e["value"] for e in container.get("env", [])})
    return env


def containers(rendered: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for doc in rendered:
        if doc["kind"] in ("Deployment", "Job"):
            [c] = doc["spec"]["template"]["spec"]["containers"]
            out[doc["metadata"]["name"]] = c
    return out


def test_every_pods_environment_is_settings(rendered: list[dict[str, Any]]) -> None:
    known = {name for name, _, _ in VARIABLES}
    for name, container in containers(rendered).items():
        env = pod_env(rendered, container)
        assert set(env) <= known, (name, set(env) - known)
        # The shipped key is a placeholder that start-up refuses until it is replaced.
        with pytest.raises(SettingsError, match="MNEME_BOOTSTRAP_KEY"):
            Settings.from_env(env)
        env["MNEME_BOOTSTRAP_KEY"] = "k" * 32
        settings = Settings.from_env(env)  # every value parses as serve would parse it
        assert settings.database_url == env["MNEME_DATABASE_URL"], name
        assert settings.bootstrap_key is not None, name
    api_env = pod_env(rendered, containers(rendered)["mneme-api"])
    api = Settings.from_env({**api_env, "MNEME_BOOTSTRAP_KEY": "k" * 32})
    assert (api.worker, api.host, api.port) == (False, "0.0.0.0", 8080)  # noqa: S104 - a pod


def test_the_pods_run_what_they_are_for_as_non_root(rendered: list[dict[str, Any]]) -> None:
    commands = {name: c["command"] for name, c in containers(rendered).items()}
    assert commands == {
        "mneme-api": ["mneme", "serve"], "mneme-worker": ["mneme", "worker"],
        "mneme-migrate": ["mneme", "migrate"],
    }  # fmt: skip
    api = containers(rendered)["mneme-api"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for doc in rendered:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
        [c] = pod["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert "memory" in c["resources"]["limits"]
        mounted = {m["mountPath"] for m in c.get("volumeMounts", [])}
        assert "/tmp" in mounted  # noqa: S108 - the one place a read-only root leaves to write
    # The Service and the disruption budget pick the API pods, and only them.
    labels = by_kind(rendered, "Deployment", "mneme-api")["spec"]["template"]["metadata"]
    for kind in ("Service", "PodDisruptionBudget"):
        spec = by_kind(rendered, kind, "mneme" if kind == "Service" else "mneme-api")["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector.items() <= labels["labels"].items(), kind
        assert selector["app.kubernetes.io/name"] == "mneme-api"
