"""A model hook whose exported graph computes something else than the trained module: the ONNX gate's
planted defect. Whether a plain model's export differs at all depends on the CPU's kernels (on some
machines ONNX Runtime and torch agree to the last bit), so the gate is tested on a difference that is
there by construction."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from workloads.training.model import mlp

# Well above --onnx-tolerance's default (1e-4) and any kernel's rounding.
EXPORT_SKEW = 1e-2


class SkewedOnExport(nn.Module):
    """The trainer's MLP, with every logit moved by ``EXPORT_SKEW`` in the exported graph only."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.inner = mlp(n_features, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        logits: Tensor = self.inner(x)
        return logits + EXPORT_SKEW if torch.onnx.is_in_onnx_export() else logits


def skewed_mlp(n_features: int, n_classes: int) -> nn.Module:
    return SkewedOnExport(n_features, n_classes)
