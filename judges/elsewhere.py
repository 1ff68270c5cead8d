"""Objects the plan references but does not create: those every cluster has (the API server's bootstrap
objects) and those the operator makes by a documented step. Data, read by ``judges.references``: a
reference that resolves here is not a dangling one; an operator-made one is reported as advisory, so the
operator sees what to create before the pods that need it can start.

Sources for the built-ins: kubernetes.io "Using RBAC Authorization" (Default roles and role bindings:
``cluster-admin``, ``admin``, ``edit``, ``view``, the ``system:`` roles, and the kube-system Role
``extension-apiserver-authentication-reader``); "Pod Priority and Preemption" (``system-cluster-critical``,
``system-node-critical`` ship with every cluster); "Service Accounts" (every namespace gets ``default``);
"Configure Service Accounts for Pods" (the root CA ConfigMap ``kube-root-ca.crt`` in every namespace);
"Namespaces" (Initial namespaces: ``default``, ``kube-node-lease``, ``kube-public``, ``kube-system``).

Built in on one managed Kubernetes only (``cluster``: ``eks`` or ``aks``), the StorageClasses the service
creates with every cluster: AKS's ``default``, ``managed-csi``, ``managed-csi-premium`` (learn.microsoft.com
"Create and manage persistent volumes with Azure Disks in AKS", built-in storage classes; "Storage options
for applications in AKS", Storage classes) and ``azurefile-csi``, ``azurefile-csi-premium`` ("Use Azure
Files CSI driver in AKS", built-in storage classes); EKS's ``gp2`` (docs.aws.amazon.com "Store Kubernetes
volumes with Amazon EBS": clusters since Kubernetes 1.11 have the in-tree ``gp2`` class, provisioned by
the EBS CSI driver since CSI migration; since EKS 1.30 it is no longer marked default on new clusters).
Judged without knowing the cluster (``mlplatform judge`` on plain manifests), every service's built-ins
resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Elsewhere:
    """An object made outside the plan; ``namespace`` and ``name`` are shell patterns (``*`` any).
    ``made_by`` says who makes it: the docs step an operator follows, or the cluster itself."""

    kind: str
    namespace: str
    name: str
    made_by: str
    operator: bool
    cluster: str = ""  # the managed Kubernetes that makes it ("eks", "aks"); "" every cluster

    def covers(self, kind: str, namespace: str, name: str, cluster: str | None = None) -> bool:
        """Whether this is the object; on ``cluster`` (``None``: not known, any)."""
        return (
            self.kind == kind
            and fnmatchcase(namespace, self.namespace)
            and fnmatchcase(name, self.name)
            and (cluster is None or self.cluster in {"", cluster})
        )


_BUILT_IN = "the API server (built in)"
BUILT_IN: tuple[Elsewhere, ...] = (
    Elsewhere("ServiceAccount", "*", "default", _BUILT_IN, operator=False),
    Elsewhere("ConfigMap", "*", "kube-root-ca.crt", _BUILT_IN, operator=False),
    Elsewhere("PriorityClass", "", "system-cluster-critical", _BUILT_IN, operator=False),
    Elsewhere("PriorityClass", "", "system-node-critical", _BUILT_IN, operator=False),
    *(
        Elsewhere("ClusterRole", "", name, _BUILT_IN, operator=False)
        for name in ("cluster-admin", "admin", "edit", "view", "system:*")
    ),
    Elsewhere("Role", "kube-system", "extension-apiserver-authentication-reader", _BUILT_IN, operator=False),
    *(
        Elsewhere("Namespace", "", name, _BUILT_IN, operator=False)
        for name in ("default", "kube-node-lease", "kube-public", "kube-system")
    ),
    *(
        Elsewhere("StorageClass", "", name, "AKS (built in)", operator=False, cluster="aks")
        for name in (
            "default",
            "managed-csi",
            "managed-csi-premium",
            "azurefile-csi",
            "azurefile-csi-premium",
        )
    ),
    Elsewhere("StorageClass", "", "gp2", "EKS (built in)", operator=False, cluster="eks"),
)

# What the platform's docs tell the operator to create (review cluster.md B-N1), and what a chart's own
# hook Job creates at install time.
OPERATOR_MADE: tuple[Elsewhere, ...] = (
    Elsewhere(
        "Secret",
        "ml-registry",
        "registry-admin",
        "docs/registry.md, Access: kubectl -n ml-registry create secret generic registry-admin",
        operator=True,
    ),
    Elsewhere(
        "Secret",
        "ml-inference",
        "inference-auth",
        "docs/inference.md, auth: Secret inference-auth (key token) in ml-inference",
        operator=True,
    ),
    Elsewhere(
        "Secret",
        "ml-inference",
        "inference-tls",
        "docs/inference.md, TLS: Secret inference-tls (type kubernetes.io/tls) in ml-inference",
        operator=True,
    ),
    Elsewhere(
        "Secret",
        "ml-inference",
        "inference-ca",
        "docs/inference.md, TLS: Secret inference-ca (key ca.crt) in ml-inference",
        operator=True,
    ),
    Elsewhere(
        "Secret",
        "monitoring",
        "alertmanager-receiver",
        "docs/inference.md, alerting: kubectl -n monitoring create secret generic alertmanager-receiver",
        operator=True,
    ),
    Elsewhere(
        "Secret",
        "monitoring",
        "kube-prometheus-stack-admission",
        "kube-prometheus-stack's admission-create hook Job (pre-install), certificate for its webhooks",
        operator=False,
    ),
)

ELSEWHERE: tuple[Elsewhere, ...] = (*BUILT_IN, *OPERATOR_MADE)


def made_elsewhere(kind: str, namespace: str, name: str, cluster: str | None = None) -> Elsewhere | None:
    return next((e for e in ELSEWHERE if e.covers(kind, namespace, name, cluster)), None)
