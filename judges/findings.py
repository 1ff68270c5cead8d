"""What a judge says about one object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["mandatory", "advisory"]


@dataclass(frozen=True)
class Subject:
    """An object by its identity: kind, namespace ("" when cluster-scoped) and name."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Subject:
        metadata = obj.get("metadata") or {}
        return cls(str(obj.get("kind", "")), str(metadata.get("namespace") or ""), str(metadata.get("name")))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Finding:
    """``policy`` names the judge's rule (as a pack policy name does), ``subject`` the object judged."""

    policy: str
    level: Level
    subject: Subject
    message: str

    @property
    def mandatory(self) -> bool:
        return self.level == "mandatory"

    def __str__(self) -> str:
        return f"{self.level} {self.policy}: {self.subject}: {self.message}"
