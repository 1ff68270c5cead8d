"""Seldon MLServer serving the version through a custom runtime, with adaptive batching: V2
``POST /v2/models/model/infer`` (one FP32 input of shape [1, features]) -> one FP32 output of shape
[1, classes]; ready when ``/v2/health/ready`` answers 200.

``python -m benchmarks.peers.mlserver_server --model DIR --port P`` in the MLServer venv: what
``mlserver start`` does with a ``settings.json`` and a ``model-settings.json``, written here as the
settings objects themselves. There is no ONNX runtime package for MLServer 1.7.1 (its PyPI runtimes are
sklearn, xgboost, lightgbm, catboost, mlflow, huggingface, mllib), so the runtime is this module's
``MLModel`` subclass, as MLServer's custom-runtime guide writes one. MLServer's defaults, but for the
ports (the gRPC and metrics servers on free loopback ports, so that they never collide) and the
batching: up to MAX_BATCH_SIZE requests merged into one model run, waiting at most BATCH_WAIT_S.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from mlserver import MLModel, MLServer
from mlserver.codecs import NumpyCodec
from mlserver.logging import configure_logger
from mlserver.settings import ModelParameters, ModelSettings, Settings
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import install_uvloop_event_loop

from benchmarks.peers.common import BATCH_WAIT_S, MAX_BATCH_SIZE, MODEL_NAME, Session, parse_args


class OnnxRuntime(MLModel):
    async def load(self) -> bool:
        self.session = Session(Path(self.settings.parameters.uri))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        scores = self.session.scores(NumpyCodec.decode_input(payload.inputs[0]))
        return InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output(name="scores", payload=scores)]
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def serve(settings: Settings, model: ModelSettings) -> None:
    # Inside the running loop, as ``mlserver start`` builds it (its inference pool starts tasks).
    await MLServer(settings).start([model])


def main() -> None:
    """What ``mlserver start`` runs (``mlserver.cli.main``), with these settings in place of files."""
    args = parse_args(__doc__ or "")
    configure_logger()
    install_uvloop_event_loop()
    settings = Settings(
        host="127.0.0.1", http_port=args.port, grpc_port=_free_port(), metrics_port=_free_port()
    )
    model = ModelSettings(
        name=MODEL_NAME,
        # By import path: the inference worker process imports it by name (not ``__main__``).
        implementation=f"{__spec__.name if __spec__ else __name__}.OnnxRuntime",
        max_batch_size=MAX_BATCH_SIZE,
        max_batch_time=BATCH_WAIT_S,
        parameters=ModelParameters(uri=str(args.model)),
    )
    asyncio.run(serve(settings, model))


if __name__ == "__main__":
    main()
