"""Helm releases in a plan, rendered offline into the objects their charts create.

A ``kubernetes:helm.sh/v3:Release`` is one opaque resource to the engine (and to ``pulumi preview``).
Here each release in the plan is rendered from the chart cache (``components.kubernetes.charts``) with
exactly the values in its inputs, and every object ``helm install`` would apply (CRDs from ``crds/``,
then the templates) becomes a planned child of the release: type ``kubernetes:<group/version>:<Kind>``,
parent the release's URN, the release's provider, inputs the object as the cluster holds it after the
release (namespace filled in for namespaced kinds; Helm's ``meta.helm.sh/release-name`` and
``release-namespace`` annotations on templated objects). So ``--manifests`` exports them, and the pack
judges them like the program's own objects (mlplatform/analyzer.py).

Charts are found by name and version (``<chart>-<version>.tgz``), so any program's releases render when
the cache holds their chart; the platform's pins add their written exceptions. A release that cannot be
rendered (its chart is not in the cache, or Helm refuses its values) stays unrendered and
``unrendered_problems`` says which and why, one line each: ``plan`` and ``check`` refuse the stack with
those lines unless told ``--allow-unrendered`` (then they are warnings, and the pack's
``k8s-unrendered-content`` advisory names the releases), since a plan that silently lacks a chart's
objects judges less than the platform.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from components.kubernetes import helm_engine
from components.kubernetes.charts import (
    Rendered,
    cache_dir,
    chart_name,
    missing_reason,
    package_file,
    pinned,
    render,
)
from components.kubernetes.objects import resource_name, type_token
from judges.kube import CLUSTER_KINDS
from mlplatform.graph import HELM_RELEASE, PlannedResource, as_applied


def rendered_children(resources: Iterable[PlannedResource]) -> list[PlannedResource]:
    """The objects of every release in ``resources`` whose chart the cache holds, as planned children."""
    releases = [r for r in resources if r.type == HELM_RELEASE]
    directory = cache_dir()
    rendered = [(release, _rendering(release, directory)[0]) for release in releases]
    scopes = _crd_scopes(o for _, found in rendered if found for o in found.crds)
    return [
        _child(release, obj, scopes)
        for release, found in rendered
        if found is not None
        for obj in found.objects
    ]


def chart_label(release: PlannedResource) -> str:
    """``gpu-operator v26.7.0``: the chart a release installs (the last part of a URL or OCI reference)
    and its version, as a person names it."""
    chart = str(release.inputs.get("chart", "?")).rstrip("/").rsplit("/", 1)[-1]
    return f"{chart} {release.inputs.get('version', '')}".strip()


def unrendered(resources: Iterable[PlannedResource]) -> list[PlannedResource]:
    """Releases in ``resources`` with no rendered child: their charts could not be rendered."""
    listed = list(resources)
    parents = {r.parent for r in listed}
    return [r for r in listed if r.type == HELM_RELEASE and r.urn not in parents]


def unrendered_problems(resources: Iterable[PlannedResource]) -> list[str]:
    """One line per release in ``resources`` that was not rendered, naming it and why."""
    directory = cache_dir()
    return [
        f"Helm release {release.name} is not rendered: {_rendering(release, directory)[1]}"
        for release in unrendered(resources)
    ]


def _rendering(release: PlannedResource, directory: Path) -> tuple[Rendered | None, str]:
    """The release's objects, or None and why not."""
    inputs = as_applied(release.inputs)
    chart, version = chart_name(str(inputs.get("chart", ""))), str(inputs.get("version", ""))
    path = directory / package_file(chart, version)
    if not path.is_file():
        repo = str((inputs.get("repositoryOpts") or {}).get("repo", ""))
        return None, missing_reason(chart, version, repo, directory)
    values = json.dumps(inputs.get("values") or {}, sort_keys=True)
    name, namespace = str(inputs.get("name") or release.name), str(inputs.get("namespace") or "default")
    try:
        rendered = _render(chart, version, path, values, name, namespace)
    except helm_engine.HelmError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"Helm cannot render {path.name} with its values ({reason})"
    if not rendered.objects:
        return None, f"{path.name} renders no objects with its values"
    return rendered, ""


@cache
def _render(chart: str, version: str, path: Path, values: str, release: str, namespace: str) -> Rendered:
    """Stacks that share a release's values share its rendering."""
    chart_pin = pinned(chart, version)
    exceptions = chart_pin.exceptions if chart_pin is not None else {}
    return render(path, json.loads(values), release, namespace, exceptions)


def _crd_scopes(crds: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Custom kind → ``Namespaced`` or ``Cluster``, from the CRDs the charts ship."""
    return {
        str(crd["spec"]["names"]["kind"]): str(crd["spec"].get("scope", "Namespaced"))
        for crd in crds
        if crd.get("kind") == "CustomResourceDefinition"
    }


def _child(release: PlannedResource, obj: Mapping[str, Any], scopes: Mapping[str, str]) -> PlannedResource:
    namespace = str(as_applied(release.inputs).get("namespace") or "default")
    metadata = dict(obj.get("metadata") or {})
    kind = str(obj["kind"])
    if kind in CLUSTER_KINDS or scopes.get(kind) == "Cluster":
        metadata.pop("namespace", None)
    else:
        metadata.setdefault("namespace", namespace)
    installed = {**obj, "metadata": metadata}
    token = type_token(installed)
    name = f"{release.name}-{resource_name(installed)}"
    prefix, _, _ = release.urn.rpartition("::")
    return PlannedResource(
        urn=f"{prefix}${token}::{name}",
        type=token,
        name=name,
        parent=release.urn,
        custom=True,
        provider=release.provider,
        inputs=installed,
        dependencies=(release.urn,),
    )
