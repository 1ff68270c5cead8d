"""One SQLite file, one opener (cluster review B-N2).

SQLite on a network file system is safe only for one process on one host at a time: its locks rely on
the file system's, which NFS and SMB implement unreliably ("SQLite Over a Network, Caveats and
Considerations", sqlite.org/useovernet.html). A container says where its database is with an environment
variable ending in ``SQLITE_PATH`` (the registry's ``REGISTRY_SQLITE_PATH``). Mandatory: the same path in
the pods of two workload objects (a migration Job beside the server it migrates), or a Deployment that
can run two such pods at once (more than one replica, or a rolling update, whose new pod starts before
the old one stops; ``Recreate`` stops it first, Kubernetes "Deployments", Recreate Deployment).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import pods

POLICY = "sqlite-single-opener"


def _paths(pod_spec: Mapping[str, Any]) -> set[str]:
    return {
        str(env["value"])
        for key in ("initContainers", "containers")
        for container in pod_spec.get(key) or []
        for env in container.get("env") or []
        if str(env.get("name", "")).endswith("SQLITE_PATH") and "value" in env
    }


def judge_sqlite_openers(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    by_name = {
        (str(o["metadata"].get("namespace", "")), o.get("kind"), o["metadata"].get("name")): o
        for o in objects
        if o.get("metadata")
    }
    openers: dict[tuple[str, str], list[Subject]] = defaultdict(list)
    findings = []
    for pod in pods(objects):
        for path in _paths(pod.spec):
            openers[(pod.namespace, path)].append(pod.owner)
        if not _paths(pod.spec) or pod.owner.kind != "Deployment":
            continue
        spec = by_name[(pod.namespace, "Deployment", pod.owner.name)].get("spec") or {}
        strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
        if spec.get("replicas", 1) != 1 or strategy != "Recreate":
            findings.append(
                Finding(
                    POLICY,
                    "mandatory",
                    pod.owner,
                    f"opens a SQLite database with {spec.get('replicas', 1)} replicas and a {strategy} "
                    "strategy: two pods may hold the file at once; use 1 replica and Recreate",
                )
            )
    for (namespace, path), owners in sorted(openers.items()):
        if len(owners) > 1:
            names = ", ".join(f"{o.kind} {o.name}" for o in owners)
            findings.append(
                Finding(
                    POLICY,
                    "mandatory",
                    owners[0],
                    f"SQLite database {path} in {namespace} is opened by {names}: their pods can hold it at "
                    "once; migrate in the server's own pod (an init container) instead",
                )
            )
    return findings
