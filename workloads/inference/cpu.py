"""How many CPUs this container may use, for sizing ONNX Runtime's thread pool, and whether they
compute in bfloat16 natively.

ONNX Runtime sizes its pool to the host's cores, not the pod's CPU limit: on a 64-core node with a
2-CPU limit it starts 64 threads that the CFS quota then throttles, and tail latency explodes. The limit
lives in the cgroup: ``cpu.max`` on cgroup v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` on v1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPUINFO = Path("/proc/cpuinfo")
# The x86 feature flags (Linux /proc/cpuinfo names) of native bfloat16 arithmetic: AVX512_BF16 (Cooper
# Lake, Zen 4 and later) and AMX-BF16 (Sapphire Rapids and later). OpenVINO's CPU plugin runs bf16 only
# where one of them exists ("bf16 (Intel x86-64)", docs.openvino.ai CPU Device, "Supported Model Precision").
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def _quota_cpus(quota: str, period: str) -> float | None:
    """CPUs granted by a CFS quota/period pair; None when unlimited or unreadable."""
    if quota in ("max", "-1"):
        return None
    try:
        cpus = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
    return cpus if cpus > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU limit in (possibly fractional) CPUs, v2 first, then v1; None when there is none."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _quota_cpus(quota, period or "100000")
    for v1_dir in (root / "cpu", root / "cpu,cpuacct"):
        quota_v1 = _read(v1_dir / "cpu.cfs_quota_us")
        period_v1 = _read(v1_dir / "cpu.cfs_period_us")
        if quota_v1 is not None and period_v1 is not None:
            return _quota_cpus(quota_v1, period_v1)
    return None


def host_cpus() -> int:
    """CPUs this process may be scheduled on (affinity), which can be fewer than the machine has."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_cpus(root: Path = CGROUP_ROOT) -> int:
    """Whole CPUs to run on: the cgroup limit rounded down (a thread more than the quota only gets
    throttled), at least one, never more than the host offers."""
    limit = cgroup_cpu_limit(root)
    cpus = host_cpus()
    if limit is None:
        return cpus
    return max(1, min(cpus, math.floor(limit)))


def native_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """The CPU computes in bfloat16 natively (a flag of ``BF16_FLAGS`` on every processor listed); False
    where ``/proc/cpuinfo`` is absent or unreadable (not Linux): bf16 is then never assumed."""
    text = _read(cpuinfo)
    if text is None:
        return False
    flags = [set(line.partition(":")[2].split()) for line in text.splitlines() if line.startswith("flags")]
    return bool(flags) and all(BF16_FLAGS & each for each in flags)
