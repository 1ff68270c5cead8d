"""Fetch the AWS EFA installer for the training image's ``efa`` target and verify it before it runs.

The installer brings the userspace NCCL needs on EFA pools: libfabric with its ``efa`` provider
(``/opt/amazon/efa``) and the aws-ofi-nccl plugin (``/opt/amazon/ofi-nccl``). It is verified the way the
EC2 user guide's "Get started with EFA and NCCL" step 3 verifies it: the tarball's detached signature
against AWS's published key, whose fingerprint the guide lists. The base image has ``gpgv`` (apt depends
on it) but not ``gpg``, so the armored key is decoded here (RFC 4880 section 6, ASCII armor) and ``gpgv``
checks the signature; the signing key must be the one the guide names, not merely any key the download
served. Run as ``python -m workloads.training.efa_installer VERSION DEST`` in the Dockerfile.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

# Where the EC2 user guide downloads the installer, its signature and AWS's public key from.
INSTALLER_SITE = "https://efa-installer.amazonaws.com"
# The key's fingerprint as the EC2 user guide lists it ("Verify the GPG key's fingerprint"):
# 4E90 91BC BB97 A96B 26B1 5E59 A054 80B1 DD2D 3CCC ("Amazon EC2 EFA <ec2-efa-maintainers@amazon.com>").
EFA_KEY_FINGERPRINT = "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"


# What each installer release brings, from the EC2 user guide's "Elastic Fabric Adapter release notes"
# (efa-changelog): installer version -> (libfabric with the efa provider, Amazon OFI NCCL plugin).
# Only a release listed here is fetched, so the image's fabric userspace is always a cited one.
RELEASES: dict[str, tuple[str, str]] = {
    # 2026-10-22: "Upgrade to libfabric 2.7.0amzn2.0", "Upgrade to Amazon OFI NCCL Plugin 1.22.0".
    "1.51.0": ("2.7.0amzn2.0", "1.22.0"),
}


class VerificationError(Exception):
    """The tarball is not signed by the EFA maintainers' key."""


def dearmor(armored: str) -> bytes:
    """The binary packets of an ASCII-armored OpenPGP block (headers and the CRC line dropped)."""
    lines = armored.strip().splitlines()
    begin = next(i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP"))
    end = next(i for i, line in enumerate(lines) if line.startswith("-----END PGP"))
    body = lines[begin + 1 : end]
    # Armor headers ("Version: ...") end at the first blank line, when there are any.
    if "" in body:
        body = body[body.index("") + 1 :]
    return base64.b64decode("".join(line for line in body if not line.startswith("=")))


def signed_by(status: str, fingerprint: str) -> bool:
    """Whether ``gpgv --status-fd`` output reports a good signature by the key ``fingerprint``.

    ``VALIDSIG`` carries the signing (sub)key's fingerprint and, last, the primary key's (GnuPG
    doc/DETAILS, "VALIDSIG"); either may be the listed one.
    """
    for line in status.splitlines():
        fields = line.split()
        if fields[:2] == ["[GNUPG:]", "VALIDSIG"] and fingerprint in (fields[2], fields[-1]):
            return True
    return False


def verify(tarball: Path, signature: Path, key: Path) -> None:
    keyring = key.with_suffix(".gpg")
    keyring.write_bytes(dearmor(key.read_text()))
    done = subprocess.run(
        ["gpgv", "--status-fd", "1", "--keyring", str(keyring), str(signature), str(tarball)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not signed_by(done.stdout, EFA_KEY_FINGERPRINT):
        raise VerificationError(f"{tarball.name}: no good signature by {EFA_KEY_FINGERPRINT}: {done.stderr}")


def fetch(version: str, dest: Path) -> Path:
    """Download, verify and unpack installer ``version`` under ``dest``; the unpacked directory."""
    if version not in RELEASES:
        raise VerificationError(f"EFA installer {version} is not in RELEASES (cite its release notes first)")
    name = f"aws-efa-installer-{version}.tar.gz"
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for file in (name, f"{name}.sig", "aws-efa-installer.key"):
            urllib.request.urlretrieve(f"{INSTALLER_SITE}/{file}", work / file)
        verify(work / name, work / f"{name}.sig", work / "aws-efa-installer.key")
        with tarfile.open(work / name) as archive:
            archive.extractall(dest, filter="data")
    return dest / "aws-efa-installer"


if __name__ == "__main__":
    print(fetch(sys.argv[1], Path(sys.argv[2])))
