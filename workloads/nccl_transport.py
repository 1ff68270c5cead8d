"""Which network NCCL chose, read from its own init log, and whether that is the pool's fabric.

NCCL logs the network of every communicator at init, ``NCCL INFO Using network <name>``
(``src/init.cc``, ``INFO(NCCL_INIT, "Using network %s", ...)``, unchanged from 2.21 to 2.2x), with
``NCCL_DEBUG=INFO``: ``IB`` on InfiniBand, ``Libfabric`` through the aws-ofi-nccl plugin on EFA, and
``Socket`` when it fell back to TCP — which it does silently when the fabric's userspace or devices are
missing, training on at a fraction of the speed (aws-samples/awsome-distributed-training #386).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from components.handle import Fabric

# The whole name: aws-ofi-nccl's is two words in some versions ("AWS Libfabric").
_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S.*?)\s*$")
SOCKET = "Socket"
# The network NCCL uses on each RDMA fabric when it works.
EXPECTED_NETWORK: dict[Fabric, str] = {Fabric.EFA: "Libfabric", Fabric.INFINIBAND: "IB"}
# The names one network is logged under. aws-ofi-nccl calls itself "Libfabric" by default since commit
# 7c014f0 (2024-08), "AWS Libfabric" in plugin versions up to 1.11 or with NCCL_NET="AWS Libfabric",
# and "OFI" with NCCL_NET=OFI (aws/aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp,
# nvidia_plugin_name_fixup).
SPELLINGS: dict[str, frozenset[str]] = {
    "Libfabric": frozenset({"Libfabric", "AWS Libfabric", "OFI"}),
    "IB": frozenset({"IB"}),
}


def capture_init_log() -> Path:
    """Have NCCL write this process's init log (``NCCL_DEBUG_FILE``, %h/%p per process) to a fresh
    directory, read back with ``network_of``; call before the first communicator is created."""
    directory = Path(tempfile.mkdtemp(prefix="nccl-"))
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    os.environ["NCCL_DEBUG_FILE"] = str(directory / "nccl.%h.%p.log")
    return directory


def networks_in(lines: Iterable[str]) -> set[str]:
    return {match.group(1) for line in lines if (match := _USING_NETWORK.search(line))}


def network_of(log_dir: Path) -> str | None:
    """The network this process's NCCL logs name (NCCL_DEBUG_FILE files under ``log_dir``); None when no
    communicator was initialised, or when they disagree (each is then checked by the caller)."""
    found: set[str] = set()
    for path in sorted(log_dir.glob("*")):
        found |= networks_in(path.read_text(errors="replace").splitlines())
    if len(found) == 1:
        return found.pop()
    return SOCKET if SOCKET in found else None


def transport_problem(network: str | None, expected: str) -> str | None:
    """One line when NCCL is not on the expected network, else None."""
    if network is None:
        return f"NCCL logged no 'Using network' line; expected {expected} (is NCCL_DEBUG=INFO reaching it?)"
    if network not in SPELLINGS.get(expected, frozenset({expected})):
        hint = " (TCP sockets: the fabric's devices or userspace are missing)" if network == SOCKET else ""
        return f"NCCL uses network {network}{hint}; this pool's fabric needs {expected}"
    return None
