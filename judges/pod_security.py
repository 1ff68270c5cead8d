"""Pod Security admission, offline: each pod judged against the level its namespace enforces
(``pod-security.kubernetes.io/enforce``), by the controls of the Pod Security Standards (kubernetes.io
"Pod Security Standards", policy version latest), plus one rule the standards miss.

The extra rule (``nonroot-capabilities``): capabilities added to a container that runs as a non-zero UID
are inert. Kubernetes and containerd put added capabilities in the bounding, inheritable and permitted
sets, never the ambient set, so a non-root process loses them at ``execve`` (kubernetes/kubernetes#56374;
containerd/containerd#5668 closed unmerged); ``IPC_LOCK`` then does nothing and RDMA memory registration
runs under the node's memlock limit (review cluster.md A4).

A namespace without the label, or not created by the plan, enforces ``privileged`` (the admission
plugin's default, which EKS and AKS keep).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from judges.cel import pod_guards
from judges.findings import Finding, Subject
from judges.kube import Pod, namespace_labels, of_kind, pods

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
POLICY = "pod-security"
NONROOT_POLICY = "nonroot-capabilities"
UNGUARDED_POLICY = "pod-security-level-unguarded"

# Baseline "Capabilities": the only ones that may be added.
_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Baseline "Sysctls": the safe set.
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# Baseline "SELinux": allowed types.
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# Restricted "Volume Types".
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_NOT_VOLUME_SOURCE = frozenset({"name"})


def _context(pod: Pod, container: Mapping[str, Any], key: str) -> Any:
    """A security setting as it takes effect: the container's, else the pod's."""
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else (pod.spec.get("securityContext") or {}).get(key)


def _baseline(pod: Pod) -> Iterator[str]:
    spec = pod.spec
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            yield f"{key}: true (Host Namespaces)"
    if (spec.get("securityContext") or {}).get("windowsOptions", {}).get("hostProcess"):
        yield "hostProcess (HostProcess)"
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"volume {volume['name']} is hostPath (HostPath Volumes)"
    for name, value in _pod_and_containers(pod, "seLinuxOptions"):
        if value.get("type", "") not in _SELINUX_TYPES or "user" in value or "role" in value:
            yield f"{name}: seLinuxOptions {value} (SELinux)"
    for name, value in _pod_and_containers(pod, "seccompProfile"):
        if value.get("type") == "Unconfined":
            yield f"{name}: seccompProfile Unconfined (Seccomp)"
    for name, value in _pod_and_containers(pod, "appArmorProfile"):
        if value.get("type") not in {None, "RuntimeDefault", "Localhost"}:
            yield f"{name}: appArmorProfile {value.get('type')} (AppArmor)"
    for sysctl in (spec.get("securityContext") or {}).get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            yield f"sysctl {sysctl.get('name')} (Sysctls)"
    for container in pod.containers():
        name, context = container["name"], container.get("securityContext") or {}
        if context.get("privileged"):
            yield f"container {name}: privileged (Privileged Containers)"
        added = set((context.get("capabilities") or {}).get("add") or []) - _BASELINE_CAPABILITIES
        if added:
            yield f"container {name}: adds {', '.join(sorted(added))} (Capabilities)"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"container {name}: hostPort {port['hostPort']} (Host Ports)"
        if context.get("procMount", "Default") != "Default":
            yield f"container {name}: procMount {context['procMount']} (/proc Mount Type)"


def _pod_and_containers(pod: Pod, key: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    value = (pod.spec.get("securityContext") or {}).get(key)
    if value:
        yield "pod", value
    for container in pod.containers():
        value = (container.get("securityContext") or {}).get(key)
        if value:
            yield f"container {container['name']}", value


def _restricted(pod: Pod) -> Iterator[str]:
    # pod-security-admission policy/check_runAsNonRoot.go and check_runAsUser.go: the pod's own setting is
    # judged on its own ("pod must not set runAsNonRoot=false", "pod must not set runAsUser=0"), even
    # where every container overrides it.
    context = pod.spec.get("securityContext") or {}
    if context.get("runAsNonRoot") is False:
        yield "pod: runAsNonRoot false (Running as Non-root)"
    if context.get("runAsUser") == 0:
        yield "pod: runAsUser 0 (Running as Non-root user)"
    for volume in pod.spec.get("volumes") or []:
        sources = set(volume) - _NOT_VOLUME_SOURCE
        if not sources <= _RESTRICTED_VOLUMES:
            yield f"volume {volume['name']} is {', '.join(sorted(sources))} (Volume Types)"
    for container in pod.containers():
        name, context = container["name"], container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"container {name}: allowPrivilegeEscalation is not false (Privilege Escalation)"
        if _context(pod, container, "runAsNonRoot") is not True:
            yield f"container {name}: runAsNonRoot is not true (Running as Non-root)"
        if _context(pod, container, "runAsUser") == 0:
            yield f"container {name}: runAsUser 0 (Running as Non-root user)"
        seccomp = _context(pod, container, "seccompProfile") or {}
        if seccomp.get("type") not in {"RuntimeDefault", "Localhost"}:
            yield f"container {name}: seccompProfile is not RuntimeDefault or Localhost (Seccomp)"
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"container {name}: does not drop ALL capabilities (Capabilities)"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield f"container {name}: adds {', '.join(sorted(added))} (Capabilities)"


def violations(pod: Pod, level: str) -> list[str]:
    """What the admission plugin would refuse the pod for at ``level``."""
    if level == "privileged":
        return []
    found = list(_baseline(pod))
    if level == "restricted":
        found += [v for v in _restricted(pod) if v not in found]
    return found


def _nonroot_capabilities(pod: Pod) -> Iterator[str]:
    for container in pod.containers():
        added = (container.get("securityContext") or {}).get("capabilities", {}).get("add") or []
        user = _context(pod, container, "runAsUser")
        non_root = user not in {None, 0} or (user is None and _context(pod, container, "runAsNonRoot"))
        if added and non_root:
            uid = user or "non-root"
            yield (
                f"container {container['name']} adds {', '.join(added)} but runs as UID {uid}: "
                "added capabilities never reach a non-root process's effective set (not ambient), so they "
                "do nothing"
            )


def judge_pod_security(
    objects: Sequence[Mapping[str, Any]], unseen: frozenset[str] = frozenset()
) -> list[Finding]:
    namespaces = namespace_labels(objects)
    findings = judge_unguarded_levels(objects, unseen)
    for pod in pods(objects):
        level = namespaces.get(pod.namespace, {}).get(ENFORCE_LABEL, "privileged")
        if level not in LEVELS:
            level = "restricted"  # an unknown level label is refused by the plugin; judge the strictest
        for why in violations(pod, level):
            findings.append(
                Finding(POLICY, "mandatory", pod.owner, f"namespace {pod.namespace} enforces {level}: {why}")
            )
        for why in _nonroot_capabilities(pod):
            findings.append(Finding(NONROOT_POLICY, "mandatory", pod.owner, why))
    return findings


def _needed(pods_in: list[Pod]) -> str:
    """The strictest level every one of the pods passes."""
    for level in reversed(LEVELS):
        if all(not violations(pod, level) for pod in pods_in):
            return level
    return "privileged"


_SA_GROUP = "system:serviceaccounts:"
_WORKLOAD_RESOURCES = frozenset({"pods", "daemonsets", "deployments", "statefulsets", "replicasets", "jobs"})


def _creates_workloads(role: Mapping[str, Any]) -> bool:
    return any(
        {"create", "*"} & set(rule.get("verbs") or [])
        and ({"*"} | _WORKLOAD_RESOURCES) & set(rule.get("resources") or [])
        for rule in role.get("rules") or []
    )


def controller_namespaces(objects: Sequence[Mapping[str, Any]]) -> set[str]:
    """Namespaces whose ServiceAccounts a planned role lets create pods or workloads: an operator runs
    there (the GPU and network operators make their driver DaemonSets at run time), so the plan does not
    show every pod the namespace will hold."""
    roles = {
        (str(r.get("kind")), str(r["metadata"].get("namespace") or ""), str(r["metadata"]["name"])): r
        for r in [*of_kind(objects, "Role"), *of_kind(objects, "ClusterRole")]
    }
    found = set()
    for binding in [*of_kind(objects, "RoleBinding"), *of_kind(objects, "ClusterRoleBinding")]:
        ref = binding.get("roleRef") or {}
        namespace = str(binding["metadata"].get("namespace") or "") if ref.get("kind") == "Role" else ""
        role = roles.get((str(ref.get("kind")), namespace, str(ref.get("name"))))
        if role is None or not _creates_workloads(role):
            continue
        for subject in binding.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                found.add(str(subject.get("namespace")))
            elif subject.get("kind") == "Group" and str(subject.get("name")).startswith(_SA_GROUP):
                # Every ServiceAccount of a namespace (kubernetes.io "Using RBAC Authorization").
                found.add(str(subject["name"]).removeprefix(_SA_GROUP))
    return found


def judge_unguarded_levels(
    objects: Sequence[Mapping[str, Any]], unseen: frozenset[str] = frozenset()
) -> list[Finding]:
    """A namespace the plan creates that enforces a level looser than ``restricted`` must be guarded: a
    ValidatingAdmissionPolicy bound with ``Deny`` to every pod created there that refuses a pod asking for
    the host (``cel.pod_guards``; the narrow exception the platform pairs with ``privileged``, review
    cluster.md A-N1 m29, review 37 P05).

    - ``privileged`` (or no label) admits any pod, hostPath ``/`` and ``SYS_ADMIN`` included: unguarded,
      it is refused whatever the plan's pods there need (their needing ``privileged`` is why a guard must
      narrow it, not a reason to leave it open);
    - ``baseline`` refuses host namespaces, hostPath, privileged containers and added capabilities by
      itself (the guard's probe); it must still be needed: a planned pod there fails ``restricted``.

    Not judged: namespaces where an operator makes pods at run time, decided from the plan's RBAC
    (``controller_namespaces``: a ServiceAccount of the namespace is bound to a Role or ClusterRole that
    may create pods or workloads, so the plan does not show every pod it will hold: the GPU and network
    operators' driver DaemonSets, prometheus-operator's StatefulSets), and ``unseen`` ones (a chart there
    not rendered)."""
    findings = []
    planned = pods(objects)
    controlled = controller_namespaces(objects)
    for namespace in of_kind(objects, "Namespace"):
        name = str(namespace["metadata"]["name"])
        level = ((namespace["metadata"].get("labels") or {}).get(ENFORCE_LABEL)) or "privileged"
        if level not in LEVELS or level == "restricted" or name in controlled | unseen:
            continue
        if pod_guards(objects, name):
            continue
        field = f"metadata.labels[{ENFORCE_LABEL}] {level!r}"
        if level == "privileged":
            why = (
                "no ValidatingAdmissionPolicy bound with Deny guards the pods created there and no "
                "operator makes pods there, so it admits any pod (host namespaces, hostPath /, SYS_ADMIN); "
                "narrow it with a guard policy or a stricter level"
            )
        else:
            needed = _needed([p for p in planned if p.namespace == name])
            if LEVELS.index(needed) <= LEVELS.index(level):
                continue
            why = (
                f"the plan's pods there pass {needed!r} and no ValidatingAdmissionPolicy bound with Deny "
                "guards the pods created there, so it admits pods the plan never runs"
            )
        findings.append(Finding(UNGUARDED_POLICY, "mandatory", Subject.of(namespace), f"{field}: {why}"))
    return findings
