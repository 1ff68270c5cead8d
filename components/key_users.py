"""Which people's role may use which data key: the role-to-key table (``policies/key_users.yaml``), read
here for the key policies and by the pack's ``key-use-by-role`` for its judgement, so the two cannot
disagree (issue 35 item 3; review 35 A1).

The table lives in the pack's folder because the pack imports nothing from the program and must carry
its own data (as ``policies/controls.yaml``, which the evidence writer reads); the program reads it from
there. Each domain's key policy names, beside the stack's own roles, every named person one of whose roles
the table lists for that domain (``people_using``), and nobody else.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from components.config import AccessConfig

TABLE = Path(__file__).resolve().parents[1] / "policies" / "key_users.yaml"


# How a role uses a domain's key: ``write`` (encrypt, decrypt, generate data keys) or ``read``
# (kms:Decrypt alone; review 35 C1).
Mode = Literal["read", "write"]


class RoleKeys(BaseModel):
    """The data domains whose key one people's role may use, per cloud, each with its mode, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aws: dict[str, Mode]
    azure: dict[str, Mode]
    why: str


class KeyUsersTable(BaseModel):
    """People's role -> the domains whose key it may use (the program builds AWS key policies from the
    ``aws`` maps; no Azure key role goes to a person, which the pack holds to the ``azure`` maps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    roles: dict[str, RoleKeys]


@cache
def table() -> KeyUsersTable:
    return KeyUsersTable.model_validate(yaml.safe_load(TABLE.read_text(encoding="utf-8")))


def people(access: AccessConfig) -> Iterator[tuple[str, str]]:
    """(principal, people's role) for every identity ``access`` names, the model approvers included."""
    for principal in access.platform_admins:
        yield principal, "platform-admin"
    for principal in access.key_custodians:
        yield principal, "key-custodian"
    for principals in access.ml_engineers.values():
        for principal in principals:
            yield principal, "ml-engineer"
    for principal in access.model_approvers:
        yield principal, "model-approver"
    for principal in access.auditors:
        yield principal, "auditor"


def people_using(access: AccessConfig, domain: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(writers, readers): the named people the table gives an AWS key of ``domain``, a reader where each
    of its roles that lists the domain reads it only (one person in two roles uses what either role needs)."""
    writes: dict[str, bool] = {}
    for principal, role in people(access):
        mode = table().roles[role].aws.get(domain)
        if mode is not None:
            writes[principal] = writes.get(principal, False) or mode == "write"
    writers = tuple(sorted(p for p, w in writes.items() if w))
    readers = tuple(sorted(p for p, w in writes.items() if not w))
    return writers, readers
