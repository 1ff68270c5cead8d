"""The dataset hook: ``tabular.data:breast_cancer`` returns a ``workloads.training.tasks.Dataset``.

scikit-learn's Wisconsin breast cancer data (569 samples, 30 numeric features, 2 classes) ships inside
the package, so the example runs with no download. A real hook reads the team's own data (object storage
through ``workloads.training.datasetEgressCidrs``, or the shared file system) and returns it the same
way: raw, unscaled features (the trainer fits the scaling on the training split and bakes it into the
ONNX graph) and integer labels.
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_breast_cancer

from workloads.training.tasks import Dataset


def breast_cancer() -> Dataset:
    """Features and labels, their names; the trainer carves test and validation splits from them. A
    dataset with its own validation set passes it as ``validation=(features, labels)``."""
    bunch = load_breast_cancer()
    return Dataset(
        features=np.asarray(bunch.data, dtype=np.float32),
        labels=np.asarray(bunch.target, dtype=np.int64),
        feature_names=tuple(str(name) for name in bunch.feature_names),
        class_names=tuple(str(name) for name in bunch.target_names),
    )
