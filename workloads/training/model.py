"""Models: input scaling lives inside the module, so the exported ONNX graph takes raw features.

A user model hook is ``module:function(n_features, n_classes) -> torch.nn.Module`` that maps standardized
features to class logits; the trainer wraps it in ``Classifier``, which owns the scaling statistics of the
training split as buffers (saved in the weights, baked into the ONNX graph).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from workloads.training.hooks import MODEL_HOOK_ARGS, HookError, resolve


class Standardize(nn.Module):
    """``(x - mean) / std`` with the training split's statistics; constant features pass through."""

    mean: Tensor
    std: Tensor

    def __init__(self, mean: Tensor, std: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.to(torch.float32))
        self.register_buffer("std", torch.where(std > 0, std, torch.ones_like(std)).to(torch.float32))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


class Classifier(nn.Module):
    """Raw features in, logits out: scaling first, then the user's (or the default) network."""

    def __init__(self, scale: Standardize, body: nn.Module) -> None:
        super().__init__()
        self.scale = scale
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.body(self.scale(x))
        return out


def mlp(n_features: int, n_classes: int) -> nn.Module:
    """The default body: one hidden layer is plenty for 8x8 digits."""
    return nn.Sequential(nn.Linear(n_features, 128), nn.ReLU(), nn.Linear(128, n_classes))


def build_model(spec: str, x_train: Tensor, n_classes: int) -> Classifier:
    """Build the hook's body and wrap it with scaling fitted on ``x_train`` (the training split only)."""
    body = resolve(spec, MODEL_HOOK_ARGS)(x_train.shape[1], n_classes)
    if not isinstance(body, nn.Module):
        raise HookError(f"{spec!r} returned {type(body).__name__}, not a torch.nn.Module")
    scale = Standardize(x_train.mean(dim=0), x_train.std(dim=0))
    return Classifier(scale, body)
