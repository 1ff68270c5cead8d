"""The trainer's start-up check of NCCL's network, on log lines in NCCL's own format.

The lines are what NCCL writes with ``NCCL_DEBUG=INFO`` (``<host>:<pid>:<tid> [<dev>] NCCL INFO ...``,
``Using network`` from ``src/init.cc``, the ``NET/OFI`` line from aws-ofi-nccl's plugin init).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.training.config import RunRefusedError
from workloads.training.train import check_network

SOCKET_FALLBACK = [
    "trainer-0:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.17<0>",
    "trainer-0:41:41 [0] NCCL INFO Using network Socket",
]
ON_EFA = [
    "trainer-0:41:41 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.2",
    "trainer-0:41:41 [0] NCCL INFO Using network Libfabric",
]


def _log(directory: Path, lines: list[str]) -> Path:
    (directory / "nccl.trainer-0.41.log").write_text("\n".join(lines) + "\n")
    return directory


def test_socket_fallback_on_a_fabric_pool_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunRefusedError) as refused:
        check_network(_log(tmp_path, SOCKET_FALLBACK), "Libfabric")
    (line,) = str(refused.value).splitlines()
    assert "Socket" in line and "Libfabric" in line


def test_the_fabric_network_passes(tmp_path: Path) -> None:
    check_network(_log(tmp_path, ON_EFA), "Libfabric")


def test_a_silent_nccl_is_not_taken_as_success(tmp_path: Path) -> None:
    with pytest.raises(RunRefusedError, match="no 'Using network' line"):
        check_network(tmp_path, "IB")


@pytest.mark.parametrize("name", ["Libfabric", "AWS Libfabric", "OFI"])
def test_every_name_aws_ofi_nccl_logs_counts_as_the_efa_network(tmp_path: Path, name: str) -> None:
    """aws-ofi-nccl logs "Libfabric" by default since commit 7c014f0 (2024-08), "AWS Libfabric" up to
    plugin 1.11 or with NCCL_NET="AWS Libfabric", "OFI" with NCCL_NET=OFI (aws/aws-ofi-nccl
    src/nccl_ofi_interface_nvidia.cpp, nvidia_plugin_name_fixup; cluster review D5)."""
    check_network(_log(tmp_path, [f"trainer-0:41:41 [0] NCCL INFO Using network {name}"]), "Libfabric")


def test_a_two_word_network_is_read_whole(tmp_path: Path) -> None:
    """ "Using network AWS Socket" is not "AWS" (the first word), and not the fabric."""
    with pytest.raises(RunRefusedError) as refused:
        check_network(_log(tmp_path, ["trainer-0:41:41 [0] NCCL INFO Using network AWS Socket"]), "IB")
    assert "network AWS Socket" in str(refused.value)
