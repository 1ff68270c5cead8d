"""The trainer's registry calls, made by rank 0 only: open the run, log each epoch, register the model.

No torch here: ``__main__`` re-registers a version that was written but not registered (a restart after
the model was published) without forming a process group.
"""

from __future__ import annotations

from workloads.artifacts import DatasetInfo, load_metadata
from workloads.registry.client import RegistryClient
from workloads.registry.lineage import RunSpec, TrainingRun
from workloads.training.config import TrainConfig


def run_spec(config: TrainConfig, dataset: DatasetInfo) -> RunSpec:
    return RunSpec(
        model_name=config.model_name,
        model_version=config.model_version,
        params={**config.hyperparameters(), "split_seed": config.split_seed, "dataset": config.dataset},
        recipe=config.recipe(),
        dataset_name=dataset.name,
        dataset_sha256=dataset.sha256,
        dataset_source=config.dataset,
        split_sizes=dataset.split_sizes,
    )


def open_run(config: TrainConfig, dataset: DatasetInfo) -> TrainingRun | None:
    """The run of this model version, or None without a registry."""
    if config.registry_uri is None:
        return None
    return TrainingRun.open(RegistryClient(config.registry_uri), run_spec(config, dataset))


def register_written(config: TrainConfig) -> str:
    """Register a version directory that is already complete; returns the registry's version."""
    metadata = load_metadata(config.version_dir, verify=True)
    run = open_run(config, metadata.dataset)
    assert run is not None, "called only with a registry"
    return run.register(config.version_dir, metadata).version
