"""The trainer's flags, parsed into a frozen ``TrainConfig``.

This module imports no torch: the ``mlplatform train`` CLI and the Kubernetes object function use it to
reject bad flags in a fraction of a second, before any process is launched or any Job is applied.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from workloads.artifacts import METADATA_FILE, model_version_dir
from workloads.nccl_transport import EXPECTED_NETWORK
from workloads.registry.client import TRACKING_URI_ENV
from workloads.training.hooks import DATASET_HOOK_ARGS, MODEL_HOOK_ARGS, HookError, check_spec, resolve

# Named as specs, not imported: the Pulumi program reads these flags with no numpy or torch installed.
DEFAULT_DATASET = "workloads.training.tasks:digits"
DEFAULT_MODEL = "workloads.training.model:mlp"
# The recipe a run's checkpoints belong to, beside them; read without torch by ``preflight``.
RECIPE_FILE = "recipe.json"
# Model names and versions become directory names: keep them to one safe path component.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_REGISTRY_URI = re.compile(r"^https?://[^/\s]+(/\S*)?$")


class ConfigError(ValueError):
    """Bad trainer input; the message is the one line printed before exiting with status 2."""


class RunRefusedError(RuntimeError):
    """A run that cannot succeed as configured (NCCL off the pool's fabric, an ONNX export that does not
    match the model): deterministic, so it ends like bad input, exit 2, which the Job does not retry."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on; the same flags on every rank and every restart give the same run."""

    output: Path
    model_name: str
    model_version: str
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    seed: int
    split_seed: int
    dataset: str
    model: str
    checkpoint_every: int
    keep_checkpoints: int
    compile: bool
    onnx_tolerance: float = 1e-4
    log_format: str = "text"
    expect_network: str | None = None
    lr_schedule: str = "constant"
    clip_grad_norm: float = 0.0
    patience: int = 0
    min_delta: float = 0.0
    # The model registry (MLflow) the run logs to and registers in; None: no registry.
    registry_uri: str | None = None

    @property
    def version_dir(self) -> Path:
        return model_version_dir(self.output, self.model_name, self.model_version)

    @property
    def checkpoint_dir(self) -> Path:
        """One directory per model version, so a new version starts fresh and a restart resumes."""
        return self.output / "checkpoints" / self.model_name / self.model_version

    @property
    def recipe_path(self) -> Path:
        return self.checkpoint_dir / RECIPE_FILE

    def hyperparameters(self) -> dict[str, Any]:
        """What metadata records as the recipe (per-rank batch size; world size is recorded beside it)."""
        return {
            "epochs": self.epochs,
            "batch_size_per_rank": self.batch_size,
            "optimizer": "AdamW",
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "seed": self.seed,
            "model": self.model,
            "compile": self.compile,
            "lr_schedule": self.lr_schedule,
            "clip_grad_norm": self.clip_grad_norm,
            "patience": self.patience,
            "min_delta": self.min_delta,
        }

    def recipe(self) -> dict[str, Any]:
        """What checkpoints belong to: the hyper-parameters and the data they were trained on."""
        return {**self.hyperparameters(), "dataset": self.dataset, "split_seed": self.split_seed}


class _OneLineParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every caller reports one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects nan
        raise ValueError(text)
    return value


def _hook(text: str) -> str:
    try:
        return check_spec(text)
    except HookError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _name(text: str) -> str:
    if not _NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} must be 1-63 of [A-Za-z0-9._-], starting alphanumeric")
    return text


# argparse names a failed `type=` callable in its message; give the helpers readable names.
_positive_int.__name__ = "positive integer"
_non_negative_int.__name__ = "non-negative integer"
_non_negative_float.__name__ = "non-negative number"


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m workloads.training",
        description="Data-parallel training (run under torchrun, or alone as world size 1).",
    )
    add = parser.add_argument
    add("--output", type=Path, default=Path("out"), help="root for models/ and checkpoints/")
    add("--model-name", type=_name, default=None, help="default: the dataset function's name")
    add("--model-version", type=_name, default="1", help="a new version is a new run")
    add("--epochs", type=_positive_int, default=20)
    add("--batch-size", type=_positive_int, default=64, help="per rank")
    add("--lr", type=_non_negative_float, default=3e-3)
    add("--weight-decay", type=_non_negative_float, default=1e-4)
    add("--seed", type=int, default=0, help="model init and shuffling")
    add("--split-seed", type=int, default=0, help="held-out split; recorded in metadata")
    add("--dataset", type=_hook, default=DEFAULT_DATASET, help="module:function returning a tasks.Dataset")
    add("--model", type=_hook, default=DEFAULT_MODEL, help="module:function(n_features, n_classes)")
    add("--checkpoint-every", type=_positive_int, default=50, help="steps between checkpoints")
    add("--keep-checkpoints", type=_positive_int, default=3)
    add("--compile", action="store_true", help="torch.compile the model")
    add("--lr-schedule", choices=("constant", "cosine"), default="constant", help="cosine: to 0 at the end")
    add("--clip-grad-norm", type=_non_negative_float, default=0.0, help="max global grad norm; 0: off")
    add(
        "--patience",
        type=_non_negative_int,
        default=0,
        help="stop after this many epochs without a better validation loss; 0: off",
    )
    add(
        "--min-delta",
        type=_non_negative_float,
        default=0.0,
        help="validation loss drop that counts as better",
    )
    add("--onnx-tolerance", type=_non_negative_float, default=1e-4, help="max abs logit gap ONNX vs torch")
    add("--log-format", choices=("text", "json"), default="text", help="json: one object per line")
    add(
        "--expect-network",
        choices=sorted(EXPECTED_NETWORK.values()),
        default=None,
        help="on GPUs: refuse to train unless NCCL uses this network (the Job sets it on fabric pools)",
    )
    add(
        "--registry-uri",
        type=_registry_uri,
        default=None,
        help=f"MLflow server to log the run and register the model in (default: ${TRACKING_URI_ENV})",
    )
    return parser


def _registry_uri(text: str) -> str:
    if not _REGISTRY_URI.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} must be an http(s)://host[:port] URL")
    return text.rstrip("/")


_registry_uri.__name__ = "registry URI"


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Parse trainer flags; raises ``ConfigError`` with a one-line message on bad input."""
    args = build_parser().parse_args(argv)
    registry_uri = args.registry_uri
    if registry_uri is None and (from_env := os.environ.get(TRACKING_URI_ENV)):
        if not _REGISTRY_URI.match(from_env):
            raise ConfigError(f"${TRACKING_URI_ENV} {from_env!r} must be an http(s)://host[:port] URL")
        registry_uri = from_env.rstrip("/")
    model_name = args.model_name or args.dataset.rpartition(":")[2].lstrip("_")[:63]
    if not _NAME.match(model_name):
        raise ConfigError(f"cannot name the model after {args.dataset!r}; pass --model-name")
    return TrainConfig(
        output=args.output,
        model_name=model_name,
        model_version=args.model_version,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
        split_seed=args.split_seed,
        dataset=args.dataset,
        model=args.model,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        compile=args.compile,
        onnx_tolerance=args.onnx_tolerance,
        log_format=args.log_format,
        expect_network=args.expect_network,
        lr_schedule=args.lr_schedule,
        clip_grad_norm=args.clip_grad_norm,
        patience=args.patience,
        min_delta=args.min_delta,
        registry_uri=registry_uri,
    )


def _check_resume(config: TrainConfig) -> None:
    """Checkpoints resume only the recipe that wrote them: other hyper-parameters would silently mix
    two runs under one model version."""
    try:
        recorded = json.loads(config.recipe_path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {config.recipe_path}: {exc}") from exc
    changed = sorted(k for k, v in config.recipe().items() if recorded.get(k) != v)
    if changed:
        was = ", ".join(f"{k}={recorded.get(k)!r}" for k in changed)
        raise ConfigError(
            f"{config.checkpoint_dir} holds checkpoints of another recipe ({was}); "
            "resume with the same flags or choose a new --model-version"
        )


def _check_output(output: Path) -> None:
    """Create ``--output`` and write a probe file now, not after the first epoch's checkpoint."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=output):
            pass
    except OSError as exc:
        raise ConfigError(f"--output {output} is not writable: {exc.strerror or exc}") from exc


def preflight(config: TrainConfig) -> None:
    """Everything that can be checked before a process group forms: a bad hook, an unwritable output,
    an existing model version (versions are immutable) or a changed recipe fails here in one line."""
    if config.output.exists() and not config.output.is_dir():
        raise ConfigError(f"--output {config.output} exists and is not a directory")
    # With a registry, a finished version is registered again if need be (a restart after the model
    # was written but before its registration completed); registration happens once (lineage.py).
    if (config.version_dir / METADATA_FILE).exists() and config.registry_uri is None:
        raise ConfigError(f"{config.version_dir} already holds a model; choose a new --model-version")
    for flag, spec, arguments in (
        ("--dataset", config.dataset, DATASET_HOOK_ARGS),
        ("--model", config.model, MODEL_HOOK_ARGS),
    ):
        try:
            resolve(spec, arguments)
        except HookError as exc:
            raise ConfigError(f"{flag}: {exc}") from exc
    _check_output(config.output)
    _check_resume(config)
