"""The model hook: ``tabular.model:mlp`` is called with ``(n_features, n_classes)`` and returns a
``torch.nn.Module`` mapping standardized features to class logits (``workloads/training/model.py`` wraps
it with the scaling and exports it to ONNX)."""

from __future__ import annotations

from torch import nn


def mlp(n_features: int, n_classes: int) -> nn.Module:
    """Two hidden layers with dropout: small enough to train on a laptop's CPU in seconds."""
    return nn.Sequential(
        nn.Linear(n_features, 64),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(64, 32),
        nn.ReLU(),
        nn.Linear(32, n_classes),
    )
