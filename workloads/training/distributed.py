"""Process-group setup: the same code path under torchrun (any world size) and alone (world size 1)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# How long a rank waits in a collective for a peer that is gone before it fails (and torchrun with it).
# NCCL's default is 10 minutes, gloo's 30 (torch.distributed.constants: default_pg_timeout 30 min; the
# NCCL default comes from ProcessGroupNCCL). Both backends get NCCL's, stated here: the survivors of a
# lost node exit within it, well inside the rendezvous ``join_timeout`` (30 minutes, training/k8s.py) a
# recreated pod waits for them; and it outlasts rank 0 writing a checkpoint or the model while the others
# wait in the next collective.
PROCESS_GROUP_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed() -> DistContext:
    """Pick device and backend, bind the device *before* the process group, then join the group.

    Binding first matters for NCCL: a communicator created before ``set_device`` lands every rank on
    GPU 0. Alone (no torchrun env) we still build a one-rank group on an in-memory store, so DDP,
    the sampler and the collectives run exactly as in a multi-rank job.
    """
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    device_id = device if device.type == "cuda" else None
    if launched_by_torchrun():
        dist.init_process_group(backend, device_id=device_id, timeout=PROCESS_GROUP_TIMEOUT)
    else:
        store = dist.HashStore()  # type: ignore[attr-defined]  # public, but not re-exported in the stubs
        dist.init_process_group(
            backend, store=store, rank=0, world_size=1, device_id=device_id, timeout=PROCESS_GROUP_TIMEOUT
        )
    return DistContext(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        device=device,
        backend=backend,
    )
