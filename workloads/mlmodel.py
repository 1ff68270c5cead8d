"""A model version directory as an MLflow Model, so MLflow's own tools load what the registry holds.

MLflow loads ``models:/NAME@ALIAS`` (``mlflow.pyfunc.load_model``, ``mlflow.onnx.load_model``,
``mlflow models serve``) only from a directory with an ``MLmodel`` file naming its flavours. The files
written here are those ``mlflow.onnx.save_model`` writes in MLflow 3.17.2 (``mlflow/onnx/__init__.py``:
the ``onnx`` flavour with ``data: model.onnx``, ``python_function`` with ``loader_module: mlflow.onnx``,
``conda.yaml``, ``python_env.yaml``, ``requirements.txt``) plus the signature of the graph's tensors
(``mlflow/types/schema.py`` ``TensorSpec.to_dict``), written without MLflow: the training image does not
carry it. The execution provider is the CPU's, the one every serving pod has. The files sit beside
``model.onnx`` and are hashed into ``metadata.json`` like every other file of the version.
"""

from __future__ import annotations

import json
import platform
import uuid
from datetime import UTC, datetime
from importlib import metadata as distributions
from pathlib import Path

import yaml

from workloads.artifacts import ONNX_FILE, TensorSpec

MLMODEL_FILE = "MLmodel"
# The MLflow release whose format this is (the registry's, pyproject.toml's registry extra).
MLFLOW_FORMAT_VERSION = "3.17.2"
_RUNTIME = ("onnx", "onnxruntime")


def _signature(specs: list[TensorSpec]) -> str:
    return json.dumps(
        [
            {
                "type": "tensor",
                "tensor-spec": {"dtype": spec.dtype, "shape": [-1 if d is None else d for d in spec.shape]},
                "name": spec.name,
            }
            for spec in specs
        ]
    )


def write_mlflow_model(version_dir: Path, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    """``MLmodel`` and its environment files in ``version_dir``, which holds ``model.onnx``."""
    python = platform.python_version()
    requirements = [f"mlflow=={MLFLOW_FORMAT_VERSION}"] + [
        f"{name}=={distributions.version(name)}" for name in _RUNTIME
    ]
    onnx_version = distributions.version("onnx")
    size = (version_dir / ONNX_FILE).stat().st_size
    mlmodel = {
        "flavors": {
            "onnx": {
                "code": None,
                "data": ONNX_FILE,
                "onnx_session_options": None,
                "onnx_version": onnx_version,
                "providers": ["CPUExecutionProvider"],
            },
            "python_function": {
                "data": ONNX_FILE,
                "env": {"conda": "conda.yaml", "virtualenv": "python_env.yaml"},
                "loader_module": "mlflow.onnx",
                "python_version": python,
            },
        },
        "mlflow_version": MLFLOW_FORMAT_VERSION,
        "model_size_bytes": size,
        "model_uuid": uuid.uuid4().hex,
        "signature": {"inputs": _signature(inputs), "outputs": _signature(outputs), "params": None},
        "utc_time_created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
    }
    conda = {
        "channels": ["conda-forge"],
        "dependencies": [f"python={python}", "pip", {"pip": requirements}],
        "name": "mlflow-env",
    }
    python_env = {
        "python": python,
        "build_dependencies": ["pip"],
        "dependencies": ["-r requirements.txt"],
    }
    (version_dir / MLMODEL_FILE).write_text(yaml.safe_dump(mlmodel, sort_keys=True))
    (version_dir / "conda.yaml").write_text(yaml.safe_dump(conda, sort_keys=False))
    (version_dir / "python_env.yaml").write_text(yaml.safe_dump(python_env, sort_keys=False))
    (version_dir / "requirements.txt").write_text("\n".join(requirements) + "\n")
