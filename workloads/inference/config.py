"""The inference server's settings, validated once at the edge.

Two ways in, one model: ``mlplatform serve`` builds it from flags, and the container builds it from
``SERVE_*`` environment variables (what the Kubernetes Deployment sets), e.g. ``SERVE_MODEL_DIR``,
``SERVE_MAX_BATCH_SIZE``, ``SERVE_AUTH_TOKEN_FILE``; a registry model is ``SERVE_MODEL_URI``
(``models:/<name>@champion``) with the registry's URI in MLflow's own ``MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, FilePath, ValidationInfo, field_validator, model_validator

from workloads.artifacts import Engine
from workloads.registry.client import TRACKING_URI_ENV, ModelRef

ENV_PREFIX = "SERVE_"
DRIFT_MIN_SAMPLES = 500
OPENVINO_MISSING = "OpenVINO is not installed (pip install 'ml-platform[serve]')"


def openvino_installed() -> bool:
    """Whether OpenVINO, the optional engine (engines.py), can be imported here."""
    return importlib.util.find_spec("openvino") is not None


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: Path | None = Field(
        None, description="a model version directory: <output>/models/<name>/<version>"
    )
    model_uri: str | None = Field(
        None,
        description="a registry model, models:/<name>@<alias> (followed as the alias moves) or "
        "models:/<name>/<version>; instead of model_dir",
    )
    registry_uri: str | None = Field(
        None, description="the MLflow server model_uri refers to; default $MLFLOW_TRACKING_URI"
    )
    poll_interval_s: float = Field(
        30.0, gt=0, le=3600, description="how often a followed alias is checked for a new version"
    )
    model_cache_dir: Path | None = Field(
        None, description="where registry versions are downloaded; default a new temporary directory"
    )
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_batch_size: int = Field(32, ge=1, le=4096, description="rows per model run")
    max_wait_ms: float = Field(2.0, ge=0, le=1000, description="longest a request waits for company")
    max_queue: int = Field(1024, ge=1, description="requests waiting beyond this are refused with 503")
    deadline_ms: float = Field(
        1000, gt=0, le=60_000, description="a request that would queue longer than this is refused with 503"
    )
    max_instances: int = Field(32, ge=1, description="rows one request may carry")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="larger request bodies get 413")
    threads: int | None = Field(
        None, ge=1, description="ONNX Runtime intra-op threads per worker; default: CPU limit / workers"
    )
    workers: int = Field(
        1, ge=1, le=64, description="server processes sharing the port; more than 1 pays off for cheap models"
    )
    drift_window: int = Field(1000, ge=10, description="input rows kept for drift scoring")
    drift_min_samples: int | None = Field(
        None, ge=1, description="rows the window needs before PSI is reported; default 500 or the window"
    )
    drift_threshold: float = Field(0.2, gt=0, description="PSI above which a feature counts as drifted")
    shadow_queue: int = Field(
        64,
        ge=1,
        le=100_000,
        description="shadow copies waiting for the challenger; beyond it a copy is dropped (and counted)",
    )
    drain_min_s: float = Field(
        0.5, ge=0, description="after SIGTERM, refuse with 503 at least this long so keep-alive clients learn"
    )
    drain_timeout_s: float = Field(
        25.0, gt=0, description="longest to wait for in-flight requests on SIGTERM"
    )
    shutdown_timeout_s: float = Field(
        5.0, gt=0, description="after the drain, longest for uvicorn to close connections and stop"
    )
    max_connections: int = Field(
        1024, ge=1, description="connections (and requests) held at once; beyond it, 503"
    )
    idle_timeout_s: float = Field(
        5.0, gt=0, le=300, description="a connection must send complete request headers within this"
    )
    body_timeout_s: float = Field(
        10.0, gt=0, le=300, description="a request body must arrive within this (408)"
    )
    engine: Engine | None = Field(
        None,
        description="run every version on this engine (onnxruntime or openvino) instead of measuring "
        "both at warm-up; threads and spinning are still measured, within the thread budget",
    )
    choice_budget_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="warm-up time for measuring engines, threads and spinning (warmup.py); past it, the "
        "fastest measured so far serves",
    )
    auth_token_file: FilePath | None = Field(
        None, description="bearer token required on /v1/*, /v2/models/* and /metrics when set"
    )
    tls_cert_file: FilePath | None = None
    tls_key_file: FilePath | None = None
    access_log: bool = False
    log_level: str = "info"

    @field_validator("max_instances")
    @classmethod
    def _fits_a_batch(cls, value: int, info: ValidationInfo) -> int:
        batch = info.data.get("max_batch_size")
        if batch is not None and value > batch:
            raise ValueError(f"must not exceed the maximum batch size {batch} (a request runs in one batch)")
        return value

    @field_validator("drift_min_samples")
    @classmethod
    def _fits_the_window(cls, value: int | None, info: ValidationInfo) -> int | None:
        window = info.data.get("drift_window")
        if value is not None and window is not None and value > window:
            raise ValueError(f"must not exceed the drift window {window}")
        return value

    @field_validator("engine")
    @classmethod
    def _installed(cls, value: Engine | None) -> Engine | None:
        if value == "openvino" and not openvino_installed():
            raise ValueError(OPENVINO_MISSING)
        return value

    @field_validator("model_uri")
    @classmethod
    def _registry_model(cls, value: str | None) -> str | None:
        if value is not None:
            ModelRef.parse(value)  # ValueError naming the expected forms
        return value

    @field_validator("registry_uri")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must be an http(s)://host[:port] URL")
        return value

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("TLS needs both a certificate file and a key file")
        if (self.model_dir is None) == (self.model_uri is None):
            raise ValueError("give either a model directory or a models:/ URI, not both or neither")
        if self.model_uri is not None and self.registry_uri is None:
            raise ValueError(f"a models:/ URI needs the registry's URI (${TRACKING_URI_ENV})")
        return self

    @property
    def drift_min_rows(self) -> int:
        """The minimum sample count in force: 500 rows keeps false alarms under 1% (measured, drift.py)."""
        return self.drift_min_samples or min(DRIFT_MIN_SAMPLES, self.drift_window)

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ServeConfig:
        """Settings from ``SERVE_<FIELD>`` variables; pydantic converts and checks the strings."""
        values = {
            name: environ[f"{ENV_PREFIX}{name.upper()}"]
            for name in cls.model_fields
            if f"{ENV_PREFIX}{name.upper()}" in environ
        }
        if "registry_uri" not in values and TRACKING_URI_ENV in environ:
            values["registry_uri"] = environ[TRACKING_URI_ENV]
        return cls.model_validate(values)
