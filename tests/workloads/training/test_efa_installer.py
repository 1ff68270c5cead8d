"""The EFA installer is verified before it runs: a good signature by the key the EC2 user guide lists
("Verify the GPG key's fingerprint": 4E90 91BC BB97 A96B 26B1 5E59 A054 80B1 DD2D 3CCC), nothing else."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from workloads.training.efa_installer import EFA_KEY_FINGERPRINT, VerificationError, dearmor, fetch, signed_by


def test_dearmor_drops_headers_and_the_checksum_line() -> None:
    packets = bytes(range(40))
    body = base64.b64encode(packets).decode()
    armored = (
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\nVersion: GnuPG v1\n\n"
        f"{body[:32]}\n{body[32:]}\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"
    )
    assert dearmor(armored) == packets


def test_only_a_valid_signature_by_the_listed_key_counts() -> None:
    """GnuPG doc/DETAILS: VALIDSIG <signing key fpr> ... <primary key fpr>."""
    fields = f"{'F' * 40} 2026-10-22 x 0 4 0 1 10 00"
    good = f"[GNUPG:] GOODSIG A05480B1DD2D3CCC EFA\n[GNUPG:] VALIDSIG {fields} {EFA_KEY_FINGERPRINT}"
    assert signed_by(good, EFA_KEY_FINGERPRINT)
    assert not signed_by(
        f"[GNUPG:] VALIDSIG {'F' * 40} 2026-10-22 x 0 4 0 1 10 00 {'E' * 40}", EFA_KEY_FINGERPRINT
    )
    assert not signed_by(f"[GNUPG:] BADSIG {EFA_KEY_FINGERPRINT} x", EFA_KEY_FINGERPRINT)


def test_an_uncited_release_is_never_fetched(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="not in RELEASES"):
        fetch("1.0.0", tmp_path)
