"""The fabric test as an acceptance gate: its pass mark (a bus-bandwidth floor from the pool's sourced
line rate) and its Job's name.

Pure data and arithmetic (no torch), so the Job builder and the stack config can use it. nccl-tests'
busbw of a multi-node all-reduce is bounded by each node's network bandwidth: NCCL runs one ring or
tree channel per NIC, every channel crosses the node boundary, and busbw is normalised to the bytes each
rank moves over its bottleneck link (nccl-tests doc/PERFORMANCE.md, "AllReduce" and "Bus bandwidth").
So the node's line rate, in GB/s, is the ceiling the test's largest message approaches.
"""

from __future__ import annotations

from components.handle import Fabric, PoolHandle

# Each node's RDMA line rate (Gb/s), only where a public source states it; other fabric instance types
# get the transport check alone (no floor), never a guessed rate.
LINE_RATE_GBPS: dict[str, int] = {
    # EC2 user guide, "Maximize network bandwidth on accelerated computing instances with EFA": P5 and
    # P5e support up to 32 network cards and up to 3,200 Gbps.
    "p5.48xlarge": 3200,
    "p5e.48xlarge": 3200,
    # AWS News Blog, "New Amazon EC2 P5en instances with NVIDIA H200 Tensor Core GPUs and EFAv3
    # networking" (2024-12-02): up to 3,200 Gbps with EFAv3.
    "p5en.48xlarge": 3200,
    # Microsoft Learn, ND H100 v5 series: 8 x 400 Gb/s NDR InfiniBand, one per GPU.
    "Standard_ND96isr_H100_v5": 8 * 400,
    # Microsoft Learn, ND A100 v4 series: 8 x 200 Gb/s HDR InfiniBand, one per GPU.
    "Standard_ND96asr_v4": 8 * 200,
}

# The floor as a share of the line rate. Not a published expectation (none was found for these
# fabrics): a deliberately loose gate. NCCL's socket fallback moves a few GB/s, a job that reaches one
# NIC of 8 or 16 gets 1/8 or 1/16 of the rate, and a working fabric's 1 GiB all-reduce approaches the
# line rate; a quarter separates these with room for protocol overhead on two nodes. Raise it
# (``workloads.fabricTest.floorFraction``) once a pool has a measured baseline.
BUSBW_FLOOR_FRACTION = 0.25


def busbw_floor_gbytes(pool: PoolHandle, fraction: float) -> float | None:
    """The busbw floor in GB/s (1e9 bytes, nccl-tests' unit) for ``pool``; None where the line rate is
    not sourced or the pool has no fabric."""
    rate = LINE_RATE_GBPS.get(pool.instance_type)
    if pool.fabric is Fabric.NONE or rate is None:
        return None
    return round(rate / 8 * fraction, 2)


# The test's Job on a pool is ``fabric-test-<pool>-<run id>`` (TrainingJobSpec.job_name).
FABRIC_TEST = "fabric-test"


def fabric_test_run_id(pool_name: str, run_id: str) -> str:
    return f"{pool_name}-{run_id}"
