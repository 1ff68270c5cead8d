"""Reads from Azure Resource Manager that no azure-native function covers, made by the program itself.

The preflights (features.py, zones.py) read what ``az`` reads, before anything is created, with the
token and subscription of the provider's own login (``authorization.getClientToken`` /
``getClientConfig``). The offline plan's mocks answer these reads as ARM does, through ``ARM_TRANSPORT``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
from pulumi_azure_native import authorization

# Azure public cloud's Resource Manager endpoint (the only cloud this platform deploys to).
ARM_ENDPOINT = "https://management.azure.com"
_READ_TIMEOUT_SECONDS = 30.0
# The HTTP transport ARM reads go through: the network by default; the offline plan's mocks set one that
# answers like ARM (mlplatform/mocks.py), so the plan runs the real requests and parsing.
ARM_TRANSPORT: ContextVar[httpx.BaseTransport | None] = ContextVar("arm_transport", default=None)


class ArmReadError(Exception):
    """A read ARM refused or that never reached it; the message says which and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        # ARM's HTTP status, when ARM answered.
        self.status = status


@dataclass(frozen=True)
class ArmReader:
    client: httpx.Client
    subscription_id: str

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """The JSON ARM answers ``GET path`` with, or ``ArmReadError``."""
        try:
            response = self.client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ArmReadError(f"{type(exc).__name__}: {exc}") from exc
        if response.is_error:
            # ARM error bodies are {"error": {"code", "message"}} (ARM common error response).
            raise ArmReadError(f"HTTP {response.status_code}: {response.text.strip()}", response.status_code)
        body: dict[str, Any] = response.json()
        return body


@contextmanager
def arm_reader() -> Iterator[ArmReader]:
    subscription_id = authorization.get_client_config().subscription_id
    token = authorization.get_client_token().token
    with httpx.Client(
        base_url=ARM_ENDPOINT,
        transport=ARM_TRANSPORT.get(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=_READ_TIMEOUT_SECONDS,
    ) as client:
        yield ArmReader(client, subscription_id)
