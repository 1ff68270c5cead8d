"""Every Helm chart the platform installs, pinned once: repository, version, source and the Kubernetes
minors it supports; and the offline renderer that turns a release into the objects the chart creates.

``pulumi up`` never reads these packages: the helm Release resource pulls the pinned version from the
chart's repository. ``mlplatform plan`` and ``check`` render the same version from packaged charts that
ship with the repository in ``charts/`` (``MLPLATFORM_CHARTS`` names another folder), so
``--manifests``, the policy pack, checkov and kubernetes-validate see what the chart would apply, from a
fresh clone with no network. ``charts/index.json`` records each package's upstream source, tag, commit,
license and sha256. Adding a chart is one ``ChartPin`` in ``PINS`` and its package in ``charts/``
(``mlplatform charts pull`` fetches it from the pinned repository).

What a chart does that the policies refuse is fixed through values (addons.py, monitoring.py). Where the
chart offers no value for it (a device plugin that must run privileged, a hook Job with a fixed spec),
the pin names that one object with the reason (``ChartPin.exceptions``); the renderer writes the reason
into the rendered object's ``policy.ml-platform.io/chart-exception`` annotation, which the pack honours
only on objects Helm installs (policies/mlplatform_policies/kubernetes.py). That annotation is the
review record, in plans and manifests; the chart installs the object without it.

Versions (docs/kubernetes.md "Charts and versions"): the newest each cache holds whose chart
``kubeVersion`` admits the stacks' control plane; cluster-autoscaler per control-plane minor, since the
autoscaler should match it (REFERENCE.md, EKS rules).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.kubernetes import helm_engine

PROJECT_DIR = Path(__file__).resolve().parents[2]
CHARTS_ENV = "MLPLATFORM_CHARTS"
DEFAULT_CACHE = PROJECT_DIR / "charts"
# Beside the packages: one entry per package (file, sha256, source, tag, commit, license).
INDEX = "index.json"
# Helm marks every object it installs from templates with its release (helm pkg/action: the
# setMetadataVisitor of install/upgrade); objects from crds/ are created as they are.
RELEASE_NAME = "meta.helm.sh/release-name"
RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
HELM_MANAGED = {"app.kubernetes.io/managed-by": "Helm"}
CHART_EXCEPTION = "policy.ml-platform.io/chart-exception"
_HOOK = "helm.sh/hook"
_HOOK_JOB = (
    "a Helm hook Job whose container spec the chart fixes (no values for resources or securityContext)"
)


@dataclass(frozen=True)
class ChartPin:
    """One chart at one version, where ``pulumi up`` pulls it from and where it was built from."""

    chart: str
    version: str
    repo: str
    # Upstream repository, chart folder and tag the packaged version comes from.
    source: str
    # Control-plane minors ("1.33") this version is for; empty when the chart's kubeVersion decides.
    kubernetes: tuple[str, ...] = ()
    # "<Kind>/<name>" of a rendered object (release name = chart name) -> why it is exempt from the
    # workload hardening rule: only for what no value of the chart can fix.
    exceptions: Mapping[str, str] = field(default_factory=dict)

    @property
    def file(self) -> str:
        return package_file(self.chart, self.version)

    def supports(self, kubernetes_version: str) -> bool:
        return not self.kubernetes or kubernetes_version in self.kubernetes

    @property
    def oci(self) -> bool:
        return self.repo.startswith("oci://")

    @property
    def reference(self) -> str:
        """What Helm is asked for: the chart's name in an HTTP repository, ``oci://host/path/name`` in a
        registry (Helm's own two reference styles)."""
        return f"{self.repo}/{self.chart}" if self.oci else self.chart


def chart_name(reference: str) -> str:
    """The chart's name in a release's ``chart`` input, an OCI reference included."""
    return reference.rsplit("/", 1)[-1] if reference.startswith("oci://") else reference


PINS: tuple[ChartPin, ...] = (
    ChartPin(
        "gpu-operator",
        "v26.7.0",
        "https://helm.ngc.nvidia.com/nvidia",
        "NVIDIA/gpu-operator deployments/gpu-operator @ v26.7.0",
        exceptions={
            "Deployment/gpu-operator": "the operator's pod securityContext is fixed by the chart "
            "(templates/operator.yaml); it runs in the privileged gpu-operator namespace",
            "Job/gpu-operator-upgrade-crd": _HOOK_JOB,
            "Job/gpu-operator-cleanup-gpucluster": _HOOK_JOB,
        },
    ),
    ChartPin(
        "network-operator",
        "26.4.1",
        "https://helm.ngc.nvidia.com/nvidia",
        "Mellanox/network-operator deployment/network-operator @ v26.4.1",
        exceptions={
            "Job/network-operator-upgrade-crd": _HOOK_JOB,
            "Job/network-operator-keep-ncp": _HOOK_JOB,
        },
    ),
    # 0.5.10 and later know p6-b200's EFA devices (aws/eks-charts); 0.5.30 is the newest published.
    ChartPin(
        "aws-efa-k8s-device-plugin",
        "v0.5.30",
        "https://aws.github.io/eks-charts",
        "aws/eks-charts stable/aws-efa-k8s-device-plugin @ v0.0.241",
        exceptions={
            "DaemonSet/aws-efa-k8s-device-plugin": "a device plugin registers with the kubelet's socket "
            "and opens /dev/infiniband: privileged on the host network by design (templates/daemonset.yaml)",
        },
    ),
    ChartPin(
        "nvidia-device-plugin",
        "0.17.1",
        "https://nvidia.github.io/k8s-device-plugin",
        "NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin @ v0.17.1",
    ),
    ChartPin(
        "metrics-server",
        "3.13.1",
        "https://kubernetes-sigs.github.io/metrics-server/",
        "kubernetes-sigs/metrics-server charts/metrics-server @ metrics-server-helm-chart-3.13.1",
    ),
    # appVersion 1.33.0 / 1.34.2 / 1.35.0: the autoscaler release for that control-plane minor.
    ChartPin(
        "cluster-autoscaler",
        "9.51.0",
        "https://kubernetes.github.io/autoscaler",
        "kubernetes/autoscaler charts/cluster-autoscaler @ cluster-autoscaler-chart-9.51.0",
        kubernetes=("1.33",),
    ),
    ChartPin(
        "cluster-autoscaler",
        "9.53.0",
        "https://kubernetes.github.io/autoscaler",
        "kubernetes/autoscaler cluster-autoscaler/charts/cluster-autoscaler"
        " @ cluster-autoscaler-chart-9.53.0",
        kubernetes=("1.34",),
    ),
    ChartPin(
        "cluster-autoscaler",
        "9.59.0",
        "https://kubernetes.github.io/autoscaler",
        "kubernetes/autoscaler cluster-autoscaler/charts/cluster-autoscaler"
        " @ cluster-autoscaler-chart-9.59.0",
        kubernetes=("1.35",),
    ),
    # No 1.36 row: no published chart ships appVersion 1.36.x yet (9.60.0 is only kubernetes/autoscaler
    # PR #10169, closed unmerged; docs/operations.md, "Upgrade Kubernetes by one minor"), so config
    # refuses cluster.kubernetesVersion 1.36 in one line.
    # Published as an OCI chart only (kubernetes-sigs/kueue charts/kueue/README.md at v0.19.2).
    ChartPin(
        "kueue",
        "0.19.2",
        "oci://registry.k8s.io/kueue/charts",
        "kubernetes-sigs/kueue charts/kueue @ v0.19.2",
        exceptions={
            "PodDisruptionBudget/kueue-manager-pdb": "the chart templates no unhealthyPodEvictionPolicy"
            " (templates/manager/manager-pdb.yaml); with two replicas and minAvailable 1 an unready replica"
            " is evictable while the other is Ready, and a drain stalls only if both are unready",
        },
    ),
    # The image-signature verifier (components/kubernetes/image_verification.py); its chart names the
    # controller's image by digest (values.yaml webhook.image.version).
    ChartPin(
        "policy-controller",
        "0.10.6",
        "https://sigstore.github.io/helm-charts",
        "sigstore/helm-charts charts/policy-controller @ policy-controller-0.10.6",
        exceptions={
            "PodDisruptionBudget/policy-controller-webhook": "the chart templates no"
            " unhealthyPodEvictionPolicy (templates/webhook/poddisruptionbudget.yaml); with two replicas and"
            " minAvailable 1 an unready replica is evictable while the other is Ready",
        },
    ),
    ChartPin(
        "kube-prometheus-stack",
        "88.5.3",
        "https://prometheus-community.github.io/helm-charts",
        "prometheus-community/helm-charts charts/kube-prometheus-stack @ kube-prometheus-stack-88.5.3",
        exceptions={
            "DaemonSet/kube-prometheus-stack-prometheus-node-exporter": "node-exporter reads the host's "
            "process and network metrics: hostPID and hostNetwork are what it measures",
        },
    ),
)


def package_file(chart: str, version: str) -> str:
    """A packaged chart's file name, as ``helm pull`` and ``helm package`` write it."""
    return f"{chart}-{version}.tgz"


def pin(chart: str, kubernetes_version: str) -> ChartPin:
    """The pinned version of ``chart`` for a control plane at ``kubernetes_version``."""
    for candidate in PINS:
        if candidate.chart == chart and candidate.supports(kubernetes_version):
            return candidate
    supported = sorted(v for p in PINS if p.chart == chart for v in p.kubernetes)
    raise ValueError(
        f"no {chart} chart is pinned for Kubernetes {kubernetes_version}; pinned for: {', '.join(supported)}"
    )


def per_minor_pins() -> dict[str, frozenset[str]]:
    """Charts pinned per control-plane minor, with the minors each is pinned for: a stack's Kubernetes
    version must be among them (components/config.py refuses it otherwise)."""
    minors: dict[str, set[str]] = {}
    for candidate in PINS:
        if candidate.kubernetes:
            minors.setdefault(candidate.chart, set()).update(candidate.kubernetes)
    return {chart: frozenset(versions) for chart, versions in minors.items()}


def pinned(chart: str, version: str) -> ChartPin | None:
    """The pin a release names (chart, or its OCI reference, and version), if the platform pins it."""
    name = chart_name(chart)
    return next((p for p in PINS if p.chart == name and p.version == version), None)


def cache_dir() -> Path:
    """Where packaged charts are looked up: ``MLPLATFORM_CHARTS``, else the repository's ``charts/``."""
    configured = os.environ.get(CHARTS_ENV)
    return Path(configured).expanduser().resolve() if configured else DEFAULT_CACHE


def missing_reason(chart: str, version: str, repo: str, directory: Path) -> str:
    """Why a release's chart cannot be rendered when its package is absent, and how to get it."""
    how = (
        f"run `mlplatform charts pull --dest {directory}`"
        if pinned(chart, version)
        else f"`helm pull {chart} --repo {repo} --version {version} -d {directory}`"
    )
    return f"chart {chart} {version} is not in {directory} ({CHARTS_ENV}): {how}"


class ChartError(Exception):
    """A packaged chart that is not what its pin says (one printable line)."""


def recorded_digest(path: Path) -> str | None:
    """The sha256 the folder's ``index.json`` records for the package at ``path``, if it records one."""
    index = path.parent / INDEX
    if not index.is_file():
        return None
    entries = json.loads(index.read_text())
    return next((str(e["sha256"]) for e in entries if e.get("file") == path.name), None)


def verify(path: Path, chart: str, version: str) -> None:
    """A packaged chart loads with Helm, is the chart and version it is named for, and has the digest
    its folder's ``index.json`` records for it (so a package swapped in place is caught)."""
    recorded = recorded_digest(path)
    if recorded is not None:
        found_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if found_digest != recorded:
            raise ChartError(f"{path}: sha256 {found_digest}, but {INDEX} records {recorded}")

    try:
        loaded = helm_engine.metadata(path)
    except helm_engine.HelmError as error:
        raise ChartError(f"{path}: not a loadable Helm chart ({str(error).splitlines()[0]})") from None
    found = (loaded.get("name"), loaded.get("version"))
    if found != (chart, version):
        raise ChartError(f"{path}: holds {found[0]} {found[1]}, expected {chart} {version}")


@dataclass(frozen=True)
class Rendered:
    """What ``helm install`` applies for one release: CRDs from ``crds/`` folders first, then the
    templates (hooks included; test hooks run only on ``helm test`` and are left out)."""

    crds: tuple[dict[str, Any], ...]
    templates: tuple[dict[str, Any], ...]

    @property
    def objects(self) -> tuple[dict[str, Any], ...]:
        return self.crds + self.templates


def render(
    path: Path, values: Mapping[str, Any], release: str, namespace: str, exceptions: Mapping[str, str]
) -> Rendered:
    """Render a packaged chart with Helm's own engine (helm-python-sdk, in a process of its own:
    components/kubernetes/helm_engine.py), as an install would, with the pin's written exceptions on the
    objects they name. Helm's refusal is ``helm_engine.HelmError``."""
    manifests, crd_files = helm_engine.render(path, dict(values), release, namespace)
    crds = [doc for text in crd_files for doc in _documents(text)]
    templates = [
        doc
        for name, text in sorted(manifests.items())
        if name.endswith((".yaml", ".yml", ".tpl", ".json"))
        for doc in _documents(text)
        if ((doc.get("metadata") or {}).get("annotations") or {}).get(_HOOK) not in ("test", "test-success")
    ]
    return Rendered(
        tuple(crds), tuple(_as_installed(doc, release, namespace, exceptions) for doc in templates)
    )


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.1's ``=`` (the "value" type) is plain text to Kubernetes; CRD enums list it."""


_Loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)


def _documents(text: str) -> list[dict[str, Any]]:
    """The objects in a manifest's text, each a fresh copy (the caller may change it)."""
    documents: list[dict[str, Any]] = pickle.loads(_parsed(text))
    return documents


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> bytes:
    """A manifest's objects, pickled: every stack planned in a process renders the same charts (their
    CRDs are megabytes of YAML), and unpickling a copy is several times faster than building it again."""
    documents: list[dict[str, Any]] = []
    for document in yaml.load_all(text, Loader=_Loader):
        if isinstance(document, dict) and document.get("kind"):
            if document["kind"].endswith("List") and "items" in document:
                documents += [item for item in document["items"] if isinstance(item, dict)]
            else:
                documents.append(document)
    return pickle.dumps(documents, protocol=pickle.HIGHEST_PROTOCOL)


def _as_installed(
    obj: dict[str, Any], release: str, namespace: str, exceptions: Mapping[str, str]
) -> dict[str, Any]:
    """The object as the cluster holds it after the release (Helm's ownership label and annotations),
    with its written exception, if the pin has one for it."""
    metadata = dict(obj.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **HELM_MANAGED}
    exception = exceptions.get(f"{obj['kind']}/{metadata.get('name')}")
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        RELEASE_NAME: release,
        RELEASE_NAMESPACE: namespace,
        **({CHART_EXCEPTION: exception} if exception else {}),
    }
    return {**obj, "metadata": metadata}


def chart_values(path: Path) -> dict[str, Any]:
    """The chart's own values.yaml with each subchart's defaults under the subchart's name: every key
    a release may set (Helm passes ``<subchart>:`` values to that subchart)."""
    return _archive_values(path.read_bytes())


def _archive_values(data: bytes) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        files = {
            member.name: extracted.read()
            for member in archive.getmembers()
            if member.isfile() and (extracted := archive.extractfile(member)) is not None
        }
    root = min((name.split("/", 1)[0] for name in files), key=len)
    return _values_of(files, f"{root}/")


def _values_of(files: Mapping[str, bytes], root: str) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(files.get(f"{root}values.yaml", b"")) or {}
    subcharts = f"{root}charts/"
    for name, data in files.items():
        rest = name.removeprefix(subcharts)
        if rest == name or rest.count("/") > 1:
            continue
        if "/" not in rest and rest.endswith(".tgz"):
            sub = _archive_values(data)
            subname = rest.removesuffix(".tgz").rsplit("-", 1)[0]
        elif rest.endswith("/Chart.yaml"):
            subname = rest.split("/", 1)[0]
            sub = _values_of(files, f"{subcharts}{subname}/")
        else:
            continue
        values[subname] = _merged(sub, values.get(subname) or {})
    return values


def _merged(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Maps merged key by key, as Helm coalesces a parent's values over a subchart's."""
    merged = dict(defaults)
    for key, value in overrides.items():
        below = merged.get(key)
        merged[key] = (
            _merged(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping) else value
        )
    return merged
