"""The fabric test: nccl-tests' bus bandwidth, NCCL's transport read from its own log lines, and a real
two-rank all-reduce under torchrun (gloo) through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from components.handle import Fabric
from workloads.fabric_test import bus_bandwidth, parse_args, sizes
from workloads.nccl_transport import EXPECTED_NETWORK, network_of, networks_in, transport_problem

# Lines as NCCL prints them with NCCL_DEBUG=INFO (src/init.cc "Using network %s"; aws-ofi-nccl's
# plugin registers as "Libfabric").
SOCKET_LOG = [
    "node-0:123:123 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
    "node-0:123:123 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.17<0>",
    "node-0:123:123 [0] NCCL INFO Using network Socket",
]
EFA_LOG = [
    "node-0:123:123 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.2",
    "node-0:123:123 [0] NCCL INFO Using network Libfabric",
]


def test_busbw_is_algbw_times_two_n_minus_one_over_n() -> None:
    """nccl-tests doc/PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n."""
    assert bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert bus_bandwidth(10.0, 16) == pytest.approx(18.75)
    assert bus_bandwidth(10.0, 1) == 10.0


def test_sizes_double_from_one_mib_to_one_gib_by_default() -> None:
    args = parse_args([])
    found = list(sizes(args.min_bytes, args.max_bytes))
    assert found[0] == 1 << 20 and found[-1] == 1 << 30 and len(found) == 11


def test_transport_is_read_from_nccls_init_line(tmp_path: Path) -> None:
    assert networks_in(SOCKET_LOG) == {"Socket"}
    (tmp_path / "nccl.node-0.123.log").write_text("\n".join(EFA_LOG))
    assert network_of(tmp_path) == "Libfabric"
    assert transport_problem("Libfabric", EXPECTED_NETWORK[Fabric.EFA]) is None
    problem = transport_problem("Socket", EXPECTED_NETWORK[Fabric.INFINIBAND])
    assert problem == (
        "NCCL uses network Socket (TCP sockets: the fabric's devices or userspace are missing); "
        "this pool's fabric needs IB"
    )
    # One rank on sockets is enough to fail the pool.
    (tmp_path / "nccl.node-1.456.log").write_text("\n".join(SOCKET_LOG))
    assert network_of(tmp_path) == "Socket"


@pytest.mark.slow
def test_local_fabric_test_prints_algbw_and_busbw_per_size() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlplatform.cli",
            "fabric-test",
            "--local",
            "--nproc",
            "2",
            "--max-bytes",
            "4MiB",
            "--iters",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().endswith(tuple("0123456789"))]
    assert [row[0] for row in rows] == ["1MiB", "2MiB", "4MiB"]
    for row in rows:
        algbw, busbw = float(row[2]), float(row[3])
        assert algbw > 0 and busbw == pytest.approx(algbw, rel=1e-3)  # 2 ranks: 2(n-1)/n = 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--nproc", "1"], "--nproc must be at least 2"),
        (
            ["--max-bytes", "lots"],
            "--max-bytes 'lots': not a size; give a whole number of KiB, MiB, GiB or bytes",
        ),
        ([], "only --local runs here"),
    ],
)
def test_bad_flags_are_one_line_exit_2(argv: list[str], expected: str) -> None:
    local = [] if expected.startswith("only") else ["--local"]
    done = subprocess.run(
        [sys.executable, "-m", "mlplatform.cli", "fabric-test", *local, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and expected in done.stderr and "Traceback" not in done.stderr


def test_memlock_preflight_fails_only_without_unlimited_memlock_or_ipc_lock() -> None:
    """RDMA registration is bounded by RLIMIT_MEMLOCK unless CAP_IPC_LOCK (bit 14, linux/capability.h)
    is effective; AKS nodes give pods 64 KiB (Azure/aks-rdma-infiniband docs; cluster review A4)."""
    import resource

    from workloads.fabric_test import effective_capabilities, memlock_problem

    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t0000000000004000\n"
    ipc_lock = effective_capabilities(status)
    assert ipc_lock == 1 << 14
    assert memlock_problem(64 * 1024, ipc_lock) is None
    assert memlock_problem(resource.RLIM_INFINITY, 0) is None
    problem = memlock_problem(64 * 1024, effective_capabilities("CapEff:\t0000000000000000\n"))
    assert problem is not None and "64 KiB" in problem and "CAP_IPC_LOCK" in problem
