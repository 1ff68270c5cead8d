"""The data-parallel training loop (after pytorch/examples ``minGPT-ddp/trainer.py``).

Every rank holds the (small, in-memory) training split and walks its ``DistributedSampler`` shard in
fixed-size batches; DDP averages gradients. Progress is counted in optimizer steps and in (epoch, next
batch), so a restart resumes at the exact sampler position with the same shuffling. Rank 0 alone writes
checkpoints and the model version; every rank takes part in the collectives that feed them.

After each epoch every rank scores its shard of the validation split and one all-reduce sums the shards,
so every rank sees the same validation loss and takes the same stop decision (a rank stopping alone
would leave the others waiting in the next collective). The best epoch's weights, not the last, are
published; the test split is scored once, at the end, for the reported metric only.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.functional import cross_entropy
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from workloads.nccl_transport import capture_init_log, network_of, transport_problem
from workloads.training import logs
from workloads.training.checkpoint import (
    checkpoint_path,
    latest_valid,
    load_checkpoint,
    remove_partials,
    save_checkpoint,
    write_atomically,
)
from workloads.training.config import RunRefusedError, TrainConfig
from workloads.training.distributed import DistContext, init_distributed
from workloads.training.lineage import open_run
from workloads.training.model import Classifier, build_model
from workloads.training.tasks import Split, load_split


@dataclass(frozen=True)
class Progress:
    """Where training stands: steps done, and the epoch and batch to run next."""

    epoch: int = 0
    batch: int = 0
    step: int = 0

    def advanced(self, batches_per_epoch: int) -> Progress:
        if self.batch + 1 < batches_per_epoch:
            return Progress(self.epoch, self.batch + 1, self.step + 1)
        return Progress(self.epoch + 1, 0, self.step + 1)


def _rng_state(device: torch.device) -> dict[str, Any]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"torch": torch.get_rng_state(), "cuda": cuda, "python": random.getstate()}


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)
    random.setstate(state["python"])


@dataclass(frozen=True)
class EarlyStopping:
    """The validation record: which epoch's weights get published, and how long since one was better.

    An epoch is better when its validation loss is below the best by more than ``min_delta`` (the rule of
    tf.keras ``EarlyStopping``: "an absolute change of less than min_delta will count as no
    improvement"); ``patience`` epochs in a row without one stop the run. Checkpointed with the run, so a
    resumed run continues the count.
    """

    best_loss: float = math.inf
    best_accuracy: float = 0.0
    best_epoch: int = -1
    bad_epochs: int = 0

    def after(self, epoch: int, loss: float, accuracy: float, min_delta: float) -> EarlyStopping:
        if loss < self.best_loss - min_delta:  # a nan loss is never better
            return EarlyStopping(loss, accuracy, epoch, 0)
        return replace(self, bad_epochs=self.bad_epochs + 1)

    def exhausted(self, patience: int) -> bool:
        return patience > 0 and self.bad_epochs >= patience


def loss_sums(model: nn.Module, x: Tensor, y: Tensor, batch_size: int) -> Tensor:
    """Summed loss, correct predictions and sample count over a held-out set, in batches and in full
    precision (what the exported fp32 graph will do); sums, so shards add up across ranks."""
    sums = torch.zeros(3, dtype=torch.float64, device=x.device)
    model.eval()
    with torch.no_grad():
        for xb, yb in zip(torch.split(x, batch_size), torch.split(y, batch_size), strict=True):
            logits = model(xb).float()
            sums[0] += cross_entropy(logits, yb, reduction="sum")
            sums[1] += (logits.argmax(dim=1) == yb).sum()
            sums[2] += len(yb)
    model.train()
    return sums


def held_out_metrics(sums: Tensor, part: str) -> dict[str, float]:
    loss, correct, count = sums.tolist()
    return {f"{part}_loss": loss / count, f"{part}_accuracy": correct / count}


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bf16 where the GPU supports it (Ampere and later), else fp16 with a GradScaler; none on CPU."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class Trainer:
    """One rank's share of a run: resume, train and validate epochs, stop early, checkpoint."""

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        split: Split,
        model: Classifier,
        on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        """``on_epoch``: called on rank 0 with each epoch's metrics (the registry run logs them)."""
        self.config, self.ctx = config, ctx
        self.on_epoch = on_epoch
        self.x_train = torch.from_numpy(split.x_train).to(ctx.device)
        self.y_train = torch.from_numpy(split.y_train).to(ctx.device)
        shard = slice(ctx.rank, None, ctx.world_size)  # disjoint, and together the whole split
        self.x_val = torch.from_numpy(split.x_val[shard].copy()).to(ctx.device)
        self.y_val = torch.from_numpy(split.y_val[shard].copy()).to(ctx.device)
        self.model = model.to(ctx.device)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.autocast_dtype = autocast_dtype(ctx.device)
        # fp16 overflows where bf16 does not: scale the loss so small gradients survive (AMP recipe).
        self.scaler = torch.amp.GradScaler("cuda") if self.autocast_dtype is torch.float16 else None
        self.sampler: DistributedSampler[int] = DistributedSampler(
            TensorDataset(self.x_train, self.y_train),
            num_replicas=ctx.world_size,
            rank=ctx.rank,
            shuffle=True,
            seed=config.seed,
        )
        self.batches_per_epoch = math.ceil(self.sampler.num_samples / config.batch_size)
        self.stopping = EarlyStopping()
        # On the CPU: a copy of the best epoch's weights should not cost accelerator memory.
        self.best_model: dict[str, Tensor] | None = None
        self.progress = self._resume()
        self.saved_step = self.progress.step if self.progress.step else None
        net = self._data_parallel(self.model)
        self.net: nn.Module = torch.compile(net) if config.compile else net  # type: ignore[assignment]
        self.last_train_loss: float | None = None

    def _data_parallel(self, model: nn.Module) -> nn.Module:
        """DDP across ranks; a lone rank has nothing to average, so DDP would only copy gradients around.

        Gradients as views into DDP's communication buckets save a copy of every gradient each step.
        """
        if self.ctx.world_size == 1:
            return model
        device_ids = [self.ctx.device] if self.ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)

    def _resume(self) -> Progress:
        """Rank 0 picks the newest checkpoint that verifies and every rank loads that same one."""
        directory = self.config.checkpoint_dir
        found = None
        choice: list[int | None] = [None]
        if self.ctx.is_main:
            remove_partials(directory)
            found = latest_valid(directory)
            choice[0] = None if found is None else found[0]
        dist.broadcast_object_list(choice, src=0)
        step = choice[0]
        if step is None:
            return Progress()
        state = found[1] if found is not None else load_checkpoint(checkpoint_path(directory, step))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.stopping = EarlyStopping(**state["early_stopping"])
        self.best_model = state["best_model"]
        progress = Progress(**state["progress"])
        if state["world_size"] == self.ctx.world_size:
            _set_rng_state(state["rng"][self.ctx.rank], self.ctx.device)
        else:
            # Shards differ with the world size: the old sampler position means nothing here.
            logs.log_event("resume_world_size_changed", logging.WARNING, was=state["world_size"])
            progress = Progress(progress.epoch, 0, progress.step)
        logs.log_event("resumed", **asdict(progress), path=str(checkpoint_path(directory, step)))
        return progress

    def _save(self) -> None:
        """Checkpoint after the current step; all ranks contribute their RNG state, rank 0 writes."""
        rng: list[object] = [None] * self.ctx.world_size
        dist.all_gather_object(rng, _rng_state(self.ctx.device))
        self.saved_step = self.progress.step
        if not self.ctx.is_main:
            return
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "progress": asdict(self.progress),
            "world_size": self.ctx.world_size,
            "rng": rng,
            "recipe": self.config.recipe(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "early_stopping": asdict(self.stopping),
            "best_model": self.best_model,
        }
        # Before the first checkpoint, so no checkpoint exists without the recipe preflight checks.
        if not self.config.recipe_path.exists():
            recipe = json.dumps(self.config.recipe(), indent=2).encode()
            write_atomically(self.config.recipe_path, recipe, prefix=".recipe-")
        path = save_checkpoint(
            self.config.checkpoint_dir, self.progress.step, state, keep=self.config.keep_checkpoints
        )
        logs.log_event("checkpoint", step=self.progress.step, path=str(path))

    def _lr(self) -> float:
        """The learning rate for the step about to run: a pure function of the step, so a resumed run
        follows the schedule exactly without scheduler state in the checkpoint."""
        if self.config.lr_schedule == "constant":
            return self.config.lr
        total = self.config.epochs * self.batches_per_epoch
        return self.config.lr * 0.5 * (1 + math.cos(math.pi * min(self.progress.step, total) / total))

    def _step(self, indices: Tensor) -> Tensor:
        x, y = self.x_train[indices], self.y_train[indices]
        with torch.autocast(
            device_type=self.ctx.device.type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.autocast_dtype is not None,
        ):
            logits = self.net(x)
        loss = cross_entropy(logits.float(), y)
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr()
        self.optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(self.scaler.scale(loss) if self.scaler else loss)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.config.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad_norm)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        indices = torch.tensor(list(self.sampler), device=self.ctx.device)
        order = torch.split(indices, self.config.batch_size)
        watch = logs.Stopwatch()
        loss_sum, samples = torch.zeros((), device=self.ctx.device), 0
        for batch in range(self.progress.batch, len(order)):
            loss_sum.add_(self._step(order[batch]), alpha=len(order[batch]))
            samples += len(order[batch])
            self.progress = self.progress.advanced(self.batches_per_epoch)
            # At the epoch's end the checkpoint waits for the validation record below.
            if self.progress.batch and self.progress.step % self.config.checkpoint_every == 0:
                self._save()
        if self.ctx.device.type == "cuda":
            # Kernels run asynchronously: without this the epoch's time is only the host's enqueueing
            # (measured on an H200: 2.5M samples/s reported, 146 % of the device's matmul rate).
            torch.cuda.synchronize(self.ctx.device)
        seconds = watch.seconds
        train = torch.stack(
            [loss_sum.double(), torch.tensor(samples, dtype=torch.float64, device=self.ctx.device)]
        )
        totals = torch.cat([train, loss_sums(self.model, self.x_val, self.y_val, self.config.batch_size)])
        dist.all_reduce(totals)  # one collective per epoch: global training loss and validation sums
        global_loss, global_samples = totals[:2].tolist()
        self.last_train_loss = global_loss / global_samples
        validation = held_out_metrics(totals[2:], "validation")
        loss, accuracy = validation["validation_loss"], validation["validation_accuracy"]
        self.stopping = self.stopping.after(epoch, loss, accuracy, self.config.min_delta)
        if self.stopping.best_epoch == epoch:
            self.best_model = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        logs.log_event(
            "epoch",
            epoch=epoch,
            epochs=self.config.epochs,
            step=self.progress.step,
            train_loss=round(self.last_train_loss, 6),
            validation_loss=round(loss, 6),
            validation_accuracy=round(accuracy, 6),
            best_epoch=self.stopping.best_epoch,
            samples=int(global_samples),
            seconds=round(seconds, 4),
            samples_per_s=round(global_samples / seconds, 1),
        )
        if self.on_epoch is not None and self.ctx.is_main:
            self.on_epoch(
                epoch,
                {
                    "train_loss": self.last_train_loss,
                    "validation_loss": loss,
                    "validation_accuracy": accuracy,
                },
            )
        if self.stopping.exhausted(self.config.patience):
            logs.log_event(
                "early_stop",
                epoch=epoch,
                patience=self.config.patience,
                best_epoch=self.stopping.best_epoch,
                best_validation_loss=round(self.stopping.best_loss, 6),
            )
        if self.progress.step % self.config.checkpoint_every == 0:
            self._save()

    def train(self) -> dict[str, float]:
        """Run the remaining epochs or until validation stops improving, checkpoint the final step, load
        the best epoch's weights, and return training and validation metrics."""
        watch = logs.Stopwatch()
        resumed_from = self.progress.step
        for epoch in range(self.progress.epoch, self.config.epochs):
            if self.stopping.exhausted(self.config.patience):  # identical on every rank: reduced inputs
                break
            self._run_epoch(epoch)
        if self.saved_step != self.progress.step:  # decided identically on every rank
            self._save()
        assert self.best_model is not None, "every run validates at least one epoch"
        self.model.load_state_dict(self.best_model)
        metrics = {"steps": float(self.progress.step), "resumed_from_step": float(resumed_from)}
        metrics["train_seconds"] = watch.seconds
        metrics |= {
            "epochs_trained": float(self.progress.epoch),
            "best_epoch": float(self.stopping.best_epoch),
        }
        metrics |= {
            "validation_loss": self.stopping.best_loss,
            "validation_accuracy": self.stopping.best_accuracy,
        }
        if self.last_train_loss is not None:
            metrics["train_loss"] = self.last_train_loss
        return metrics


def check_network(log_dir: Path, expected: str) -> None:
    """Fail in one line when NCCL fell back to sockets (or to anything but the fabric) instead of
    training at a fraction of the speed."""
    problem = transport_problem(network_of(log_dir), expected)
    if problem:
        raise RunRefusedError(problem)


def run(config: TrainConfig) -> None:
    """Train on every rank, then (rank 0) evaluate the best epoch's weights on the test split and publish
    the model version.

    Data and model hooks are resolved before joining the process group, so a bad hook fails fast with a
    one-line error instead of leaving peers waiting at the rendezvous.
    """
    logs.configure(int(os.environ.get("RANK", "0")), config.log_format)
    torch.manual_seed(config.seed)
    split = load_split(config.dataset, config.split_seed)
    model = build_model(config.model, torch.from_numpy(split.x_train), len(split.class_names))
    nccl_log = capture_init_log() if config.expect_network and torch.cuda.is_available() else None
    ctx = init_distributed()
    try:
        if nccl_log is not None and config.expect_network is not None:
            dist.barrier()  # the first collective creates the NCCL communicator, which logs its network
            check_network(nccl_log, config.expect_network)
        logs.log_event(
            "start",
            world_size=ctx.world_size,
            backend=ctx.backend,
            device=str(ctx.device),
            dataset=config.dataset,
            dataset_sha256=split.dataset_sha256,
            split_sizes=split.sizes,
            hyperparameters=config.hyperparameters(),
        )
        # Same initial weights everywhere (seeded above, and DDP broadcasts rank 0's); from here each
        # rank draws its own stream (dropout), restored per rank on resume.
        torch.manual_seed(config.seed + ctx.rank)
        _train_and_publish(config, ctx, split, model)
        # The DDP wrapper holds the process group: collected now, its gloo threads stop while the
        # interpreter is whole. Left to the interpreter's teardown, a rank that finished first could abort
        # there ("terminate called without an active exception", SIGABRT), and torchrun would restart a
        # finished group. Then every rank leaves together, once rank 0 has published the model: a worker
        # (a pod) exits 0 only when the run's model exists.
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train_and_publish(config: TrainConfig, ctx: DistContext, split: Split, model: Classifier) -> None:
    """Train on every rank; rank 0 then evaluates the best epoch's weights on the test split and writes
    the model version. The trainer (and its DDP wrapper) is released on return."""
    # Rank 0 opens the registry run first: an unreachable registry fails the run before it trains.
    run = open_run(config, split.info()) if ctx.is_main else None
    trainer = Trainer(config, ctx, split, model, on_epoch=run.log_epoch if run is not None else None)
    metrics = trainer.train()
    if ctx.is_main:
        # Only rank 0 needs the exporter (onnx, onnxscript, onnxruntime): other ranks skip the imports.
        from workloads.training.export import write_model_version

        x_test = torch.from_numpy(split.x_test).to(ctx.device)
        y_test = torch.from_numpy(split.y_test).to(ctx.device)
        metrics |= held_out_metrics(loss_sums(trainer.model, x_test, y_test, config.batch_size), "test")
        written = write_model_version(config, split, trainer.model, metrics, ctx.world_size)
        logs.log_event("model_written", path=str(config.version_dir), metrics=written.metrics)
        if run is not None:
            registered = run.register(config.version_dir, written)
            logs.log_event(
                "model_registered", name=registered.name, version=registered.version, alias="challenger"
            )
