"""The trainer's side of the registry: one MLflow run per model version, registered once as ``challenger``.

The run is found again by a deterministic key (``<model name>/<model version>``, the trainer's own
version, a new one per run) in the experiment named after the model, so a restarted or resumed process
continues the same run instead of opening another, even when it was killed before its first checkpoint.
Registration checks for a version of the model already made from that run first, so a restart after
the registry call (or during the alias move) does not register twice. Rank 0 alone talks to the
registry; nothing here imports MLflow or torch.

What the run records: the hyper-parameters as parameters, the metrics of every epoch (step = epoch),
the dataset as an MLflow dataset input (its name, its sha256 as digest, its source), the image the run
ran in (``MLPLATFORM_IMAGE``, pinned by digest on the cluster), the code version and the recipe; the
model version directory (``model.onnx``, ``metadata.json``, weights) as the run's ``model`` artifacts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.artifacts import ModelMetadata
from workloads.registry import rollout
from workloads.registry.client import ModelVersion, RegistryClient
from workloads.registry.operations import move_aliases
from workloads.registry.record import identity

RUN_KEY_TAG = "mlplatform.run_key"
MODEL_VERSION_TAG = "mlplatform.model_version"
# Who registered the version: the registry's authenticated user (training's), never its approver.
TRAINED_BY_TAG = "mlplatform.trained_by"
IMAGE_ENV = "MLPLATFORM_IMAGE"
# What started the run, set by the drift monitor (workloads/delivery/monitor.py): the record event of the
# decision, tagged on the run and on the version it registers.
TRIGGER_ENV = "MLPLATFORM_TRIGGER"
TRIGGER_TAG = "mlplatform.trigger"
# A run nobody's decision started; the drift monitor's retrains carry its decision's record event instead.
MANUAL_TRIGGER = "manual"
ARTIFACT_DIR = "model"
# MLflow's limit on a dataset digest (mlflow/utils/validation.py MAX_DATASET_DIGEST_SIZE = 36); the full
# sha256 is in the dataset's source and in the parameters.
_DIGEST_CHARS = 36


def experiment_name(model_name: str) -> str:
    """The experiment a model's training runs are logged in: the model's own name. The registry's
    launcher grants the training user EDIT on it (components/kubernetes/workloads.py ``registry_users``):
    creating a run in an experiment someone else created needs ``update`` there."""
    return model_name


@dataclass(frozen=True)
class RunSpec:
    """What identifies and describes a training run, in plain values."""

    model_name: str
    model_version: str
    params: Mapping[str, Any]
    recipe: Mapping[str, Any]
    dataset_name: str
    dataset_sha256: str
    dataset_source: str
    split_sizes: Mapping[str, int]

    @property
    def key(self) -> str:
        return f"{self.model_name}/{self.model_version}"


class TrainingRun:
    """An open MLflow run for one model version."""

    def __init__(self, client: RegistryClient, run_id: str, artifact_uri: str, spec: RunSpec) -> None:
        self.client = client
        self.run_id = run_id
        self.artifact_uri = artifact_uri
        self.spec = spec

    @classmethod
    def open(
        cls, client: RegistryClient, spec: RunSpec, environ: Mapping[str, str] = os.environ
    ) -> TrainingRun:
        """The run of ``spec.key``: found again after a restart, else created with its lineage."""
        experiment = client.experiment_id(experiment_name(spec.model_name))
        found = client.find_run(experiment, RUN_KEY_TAG, spec.key)
        if found is not None:
            info = found["info"]
            return cls(client, info["run_id"], info["artifact_uri"], spec)
        tags = {
            RUN_KEY_TAG: spec.key,
            MODEL_VERSION_TAG: spec.model_version,
            "mlplatform.image": environ.get(IMAGE_ENV, "local"),
            "mlplatform.recipe": json.dumps(dict(spec.recipe), sort_keys=True),
            TRIGGER_TAG: environ.get(TRIGGER_ENV) or MANUAL_TRIGGER,
        }
        run = client.create_run(experiment, spec.key.replace("/", "-"), tags)
        info = run["info"]
        opened = cls(client, info["run_id"], info["artifact_uri"], spec)
        params = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in spec.params.items()}
        client.log_batch(opened.run_id, params={**params, "dataset_sha256": spec.dataset_sha256})
        client.log_dataset(
            opened.run_id,
            {
                "name": spec.dataset_name,
                "digest": spec.dataset_sha256[:_DIGEST_CHARS],
                # MLflow's "code" source (mlflow.data.code_dataset_source): the hook that loads it.
                "source_type": "code",
                "source": json.dumps({"tags": {"hook": spec.dataset_source, "sha256": spec.dataset_sha256}}),
                "profile": json.dumps({"split_sizes": dict(spec.split_sizes)}),
            },
            context="training",
        )
        return opened

    def log_epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        self.client.log_batch(self.run_id, metrics=metrics, step=epoch)

    def register(self, version_dir: Path, metadata: ModelMetadata) -> ModelVersion:
        """Upload the model version, register it once and point ``challenger`` at it; finish the run."""
        name = self.spec.model_name
        final_step = int(metadata.metrics.get("epochs_trained", 0))
        self.client.log_batch(
            self.run_id,
            metrics=metadata.metrics,
            step=final_step,
            tags={"mlplatform.code_version": metadata.code_version},
        )
        source = f"{self.artifact_uri}/{ARTIFACT_DIR}"
        trainer = identity(self.client, "training")
        self.client.ensure_registered_model(name)
        existing = self.client.search_versions(name, run_id=self.run_id)
        if not existing:
            # A resumed run whose version is registered uploads nothing: the registry keeps a registered
            # version's files immutable (guard.py ``artifact_refusal``).
            self.client.upload(source, version_dir)
        version = (
            existing[-1]
            if existing
            else self.client.create_version(
                name,
                source,
                self.run_id,
                {
                    MODEL_VERSION_TAG: self.spec.model_version,
                    TRAINED_BY_TAG: trainer.name,
                    TRIGGER_TAG: os.environ.get(TRIGGER_ENV) or MANUAL_TRIGGER,
                },
            )
        )
        move_aliases(
            self.client,
            name,
            [rollout.AliasMove(rollout.CHALLENGER, version.version)],
            actor=f"{trainer} ({self.spec.key})",
            action="register",
        )
        self.client.finish_run(self.run_id)
        return version
