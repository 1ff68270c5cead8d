"""CPU limit discovery from cgroup files (v2, v1, none), with fake cgroup trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.inference.cpu import available_cpus, cgroup_cpu_limit, host_cpus


def write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "200000 100000"}, 2.0),
        ({"cpu.max": "150000 100000"}, 1.5),
        ({"cpu.max": "max 100000"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 3.0),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 0.5),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_cgroup_limit(tmp_path: Path, files: dict[str, str], limit: float | None) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    assert cgroup_cpu_limit(tmp_path) == limit


def test_threads_follow_the_limit_rounded_down_at_least_one_at_most_the_host(tmp_path: Path) -> None:
    write(tmp_path, "cpu.max", "50000 100000")
    assert available_cpus(tmp_path) == 1
    write(tmp_path, "cpu.max", f"{(host_cpus() + 8) * 100000} 100000")
    assert available_cpus(tmp_path) == host_cpus()
    write(tmp_path, "cpu.max", "max 100000")
    assert available_cpus(tmp_path) == host_cpus()
