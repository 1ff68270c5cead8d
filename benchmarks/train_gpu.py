"""Training on one GPU: our entry point under torchrun against a bare PyTorch loop, and model FLOP use.

    python benchmarks/train_gpu.py            (a CUDA GPU; about 2 minutes on one H100/H200)

CI has no GPU; this runs where one is lent. Three figures, measured in one run on the same device:

* the device's attainable bf16 matrix rate: an 8192x8192x8192 bf16 product, best of 10 after warm-up
  (the denominator of MFU here, measured rather than taken from a datasheet);
* a bare PyTorch loop (bf16 autocast, AdamW, the same model, data and batch) in samples/s;
* ours: ``python -m workloads.training`` under torchrun with one process (NCCL backend, DDP, bf16
  autocast, checkpoints off for the timed epochs), samples/s from its structured ``epoch`` log lines.

Ratio ours/bare is the overhead of the trainer (DDP wrapper, sampler, loss all-reduce) on a GPU. MFU is
6 x parameters x samples/s over the measured matrix rate (the dense-transformer rule of thumb; for an MLP
the matmul FLOPs are exactly 6 x weights per sample for forward + backward).

Bus bandwidth needs two or more GPUs on one fabric (``python -m workloads.fabric_test`` under torchrun;
the fabric-test Job on a cluster): one GPU has no link to measure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.functional import cross_entropy

REPO = Path(__file__).resolve().parents[1]
FEATURES, HIDDEN, CLASSES, SAMPLES, BATCH, EPOCHS = 1024, 8192, 10, 262_144, 8192, 4


def synthetic() -> object:
    """Dataset hook: Gaussian features labelled by a fixed random linear teacher (seeded)."""
    from workloads.training.tasks import Dataset

    rng = np.random.default_rng(0)
    features = rng.standard_normal((SAMPLES, FEATURES), dtype=np.float32)
    labels = (features @ rng.standard_normal((FEATURES, CLASSES), dtype=np.float32)).argmax(axis=1)
    return Dataset(
        features=features,
        labels=labels.astype(np.int64),
        feature_names=tuple(f"f{i}" for i in range(FEATURES)),
        class_names=tuple(str(c) for c in range(CLASSES)),
    )


def wide_mlp(n_features: int, n_classes: int) -> nn.Module:
    """Model hook: ~76M weights, so a step is matrix-bound on a GPU."""
    return nn.Sequential(
        nn.Linear(n_features, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, n_classes),
    )


def matmul_rate() -> float:
    """Attainable bf16 FLOP/s of this device: best of 10 timed 8192^3 products after 3 warm-ups."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return 2 * 8192**3 / best


def bare_loop() -> float:
    """The same model, data, optimizer and batch size in a plain bf16-autocast loop: best samples/s."""
    torch.manual_seed(0)
    data = synthetic()
    x = torch.from_numpy(data.features).cuda()  # type: ignore[attr-defined]
    y = torch.from_numpy(data.labels).cuda()  # type: ignore[attr-defined]
    model = wide_mlp(FEATURES, CLASSES).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    rates = []
    for _ in range(EPOCHS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for indices in torch.split(torch.randperm(len(y), device="cuda"), BATCH):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = cross_entropy(model(x[indices]), y[indices])
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            optimizer.step()
        torch.cuda.synchronize()
        rates.append(len(y) / (time.perf_counter() - start))
    return max(rates[1:])


def ours(output: Path) -> float:
    """``torchrun --nproc-per-node 1 -m workloads.training``, same workload: best epoch after the first."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    cmd += [
        "-m",
        "workloads.training",
        "--output",
        str(output),
        "--model-name",
        "gpu",
        "--model-version",
        "1",
    ]
    cmd += ["--dataset", "benchmarks.train_gpu:synthetic", "--model", "benchmarks.train_gpu:wide_mlp"]
    cmd += ["--batch-size", str(BATCH), "--epochs", str(EPOCHS), "--checkpoint-every", "1000000"]
    cmd += ["--log-format", "json"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"trainer failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rates = [float(e["samples_per_s"]) for e in events if e.get("event") == "epoch"]
    return max(rates[1:])


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device: this benchmark measures training on a GPU")
    sys.path.insert(0, str(REPO))
    params = sum(p.numel() for p in wide_mlp(FEATURES, CLASSES).parameters())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, model {params / 1e6:.1f}M weights")
    print(f"batch {BATCH}, {SAMPLES} samples, {EPOCHS} epochs (first is warm-up)")
    peak = matmul_rate()
    bare = bare_loop()
    with tempfile.TemporaryDirectory(prefix="train-gpu-") as tmp:
        mine = ours(Path(tmp))
    for label, rate in (("bare PyTorch loop (bf16)", bare), ("ours, torchrun 1 process", mine)):
        mfu = 6 * params * rate / peak
        print(
            f"  {label:28s} {rate:12,.0f} samples/s   {6 * params * rate / 1e12:7.1f} TFLOP/s   MFU {mfu:.1%}"
        )
    print(f"  attainable bf16 matmul        {peak / 1e12:7.1f} TFLOP/s (8192^3, best of 10)")
    print(f"  overhead ratio ours/bare      {mine / bare:.3f}")


if __name__ == "__main__":
    main()
