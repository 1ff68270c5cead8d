"""All-reduce bus bandwidth over the job's fabric, as nccl-tests measures it, with torch.distributed.

Run by torchrun (``python -m workloads.fabric_test``): ``mlplatform fabric-test --local`` here with
gloo, and as a Job on each fabric pool of the cluster with NCCL. For each message size from
``--min-bytes`` to ``--max-bytes`` (doubling) rank 0 prints the time of one all-reduce and

- algbw = size / time, and
- busbw = algbw x 2(n-1)/n, the all-reduce correction that makes the figure comparable with the
  hardware's bandwidth whatever the rank count (nccl-tests, doc/PERFORMANCE.md, "AllReduce").

The test fails (exit 1, one line) when NCCL chose its socket transport where the pool has an RDMA
fabric — NCCL then trains over TCP with no error at all — or when the busbw of the largest message is
below ``--floor-gbytes`` (derived from the fabric's line rate by the Job builder).

On an RDMA fabric it first checks that the process may pin memory: RDMA memory registration
(``ibv_reg_mr``; libfabric's EFA provider likewise) is bounded by ``RLIMIT_MEMLOCK`` unless
``CAP_IPC_LOCK`` is effective, and a pod cannot raise the limit (AKS nodes: 64 KiB,
Azure/aks-rdma-infiniband docs; NCCL then fails with "ibv_reg_mr ... Cannot allocate memory",
NVIDIA/nccl-tests#206). It prints both and exits 2 (no retry can help) when neither allows it.

torch is imported where the measurement starts, not with the module: ``mlplatform fabric-test`` reads
its sizes from here and refuses bad flags without it (0.3 s instead of 2 s), as does a Job given bad
flags.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.fatal import record_fatal
from workloads.nccl_transport import capture_init_log, network_of, transport_problem

if TYPE_CHECKING:
    import torch

MIB = 1 << 20
# linux/capability.h
CAP_IPC_LOCK = 14


@dataclass(frozen=True)
class Measurement:
    bytes: int
    seconds: float
    algbw_gbytes: float
    busbw_gbytes: float


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw x 2(n-1)/n."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else algbw


def sizes(min_bytes: int, max_bytes: int) -> Iterator[int]:
    size = min_bytes
    while size <= max_bytes:
        yield size
        size *= 2


SIZE_UNITS = {"KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    """``64MiB``, ``1GiB``, ``4096``: a byte count that is a positive multiple of 4 (float32 elements)."""
    for suffix, factor in SIZE_UNITS.items():
        if text.endswith(suffix):
            value = int(text[: -len(suffix)]) * factor
            break
    else:
        value = int(text) if text.isdigit() else 0
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive multiple of 4 bytes")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.fabric_test", description=__doc__)
    parser.add_argument("--min-bytes", type=parse_size, default=MIB)
    parser.add_argument("--max-bytes", type=parse_size, default=1 << 30)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--expect-network",
        default=None,
        help="NCCL network the fabric must use (IB, Libfabric); unset: no transport check",
    )
    parser.add_argument("--floor-gbytes", type=float, default=0.0, help="minimum busbw (GB/s) at --max-bytes")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here (rank 0)")
    args = parser.parse_args(argv)
    if args.min_bytes > args.max_bytes:
        parser.error("--min-bytes must not exceed --max-bytes")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup not negative")
    return args


def _device() -> torch.device:
    import torch

    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def measure(size: int, iters: int, warmup: int, device: torch.device) -> Measurement:
    import torch
    import torch.distributed as dist

    tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    _synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    _synchronize(device)
    seconds = (time.perf_counter() - start) / iters
    # The slowest rank sets the collective's time, as nccl-tests reports it.
    elapsed = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = float(elapsed.item())
    algbw = size / seconds / 1e9
    return Measurement(size, seconds, algbw, bus_bandwidth(algbw, dist.get_world_size()))


def _report(results: list[Measurement], world: int, backend: str) -> None:
    print(f"all-reduce over {world} ranks ({backend}); busbw = algbw x 2(n-1)/n (nccl-tests)")
    print(f"{'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for m in results:
        print(
            f"{_human(m.bytes):>10} {m.seconds * 1e6:>12.1f} {m.algbw_gbytes:>13.3f} {m.busbw_gbytes:>13.3f}"
        )


def _human(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def effective_capabilities(status: str) -> int:
    """The ``CapEff`` bit mask of a ``/proc/<pid>/status`` text (proc(5))."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def memlock_problem(limit: int, cap_effective: int) -> str | None:
    """One line when RDMA memory registration would be capped: a finite memlock limit and no
    CAP_IPC_LOCK in the effective set."""
    if limit == resource.RLIM_INFINITY or cap_effective & (1 << CAP_IPC_LOCK):
        return None
    return (
        f"locked-memory limit is {limit // 1024} KiB and CAP_IPC_LOCK is not effective: RDMA memory "
        "registration will fail (run as UID 0 with IPC_LOCK, or raise the node's memlock limit)"
    )


def _memlock_preflight() -> str | None:
    limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    cap_effective = effective_capabilities(Path("/proc/self/status").read_text())
    shown = "unlimited" if limit == resource.RLIM_INFINITY else f"{limit // 1024} KiB"
    locks = bool(cap_effective & 1 << CAP_IPC_LOCK)
    print(f"memlock: {shown}; CapEff: {cap_effective:016x} (CAP_IPC_LOCK effective: {locks})")
    return memlock_problem(limit, cap_effective)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        if exc.code == 2:  # argparse's bad-flags exit: the gate's Job must fail at once
            record_fatal("bad fabric test flags")
        raise
    import torch
    import torch.distributed as dist

    if args.expect_network and torch.cuda.is_available():
        problem = _memlock_preflight()
        if problem:
            print(f"error: fabric test: {problem}", file=sys.stderr)
            return record_fatal(problem)
    log_dir = capture_init_log() if torch.cuda.is_available() else None
    device = _device()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend)
    try:
        results = [
            measure(size, args.iters, args.warmup, device) for size in sizes(args.min_bytes, args.max_bytes)
        ]
        problems: list[str] = []
        if log_dir is not None and args.expect_network:
            problem = transport_problem(network_of(log_dir), args.expect_network)
            if problem:
                problems.append(problem)
        largest = results[-1]
        if largest.busbw_gbytes < args.floor_gbytes:
            problems.append(
                f"busbw {largest.busbw_gbytes:.2f} GB/s at {_human(largest.bytes)} is below the fabric's "
                f"floor of {args.floor_gbytes:.2f} GB/s"
            )
        if dist.get_rank() == 0:
            _report(results, dist.get_world_size(), backend)
            if args.json is not None:
                args.json.write_text(json.dumps([asdict(m) for m in results], indent=2))
            for problem in problems:
                print(f"error: fabric test: {problem}", file=sys.stderr)
        return 1 if problems else 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
