"""The naive server a user writes in fifteen lines: FastAPI on uvicorn with uvloop and httptools
(``uvicorn[standard]``), a pydantic body parameter, ``InferenceSession.run`` inline in the async handler,
a dict returned. ``POST /v1/predict`` ``{"instances": [[features]]}`` -> ``{"predictions", "scores"}``;
ready when ``/readyz`` answers 200.

``python -m benchmarks.peers.naive_server --model DIR --port P [--threads 1]`` in the product's venv
(its FastAPI, uvicorn and pydantic). Default session options: ONNX Runtime's pool of one thread per core,
spinning; ``--threads 1`` runs the model on the event loop's thread alone.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from benchmarks.peers.common import Session, arg_parser


class Instances(BaseModel):
    instances: list[list[float]]


def app(session: Session) -> FastAPI:
    api = FastAPI()

    @api.get("/readyz")
    async def readyz() -> dict[str, bool]:
        return {"ready": True}

    @api.post("/v1/predict")
    async def predict(body: Instances) -> dict[str, list[Any]]:
        scores = session.scores(body.instances)
        return {"predictions": scores.argmax(axis=1).tolist(), "scores": scores.tolist()}

    return api


def main() -> None:
    parser = arg_parser(__doc__ or "")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: its own)")
    args = parser.parse_args()
    uvicorn.run(
        app(Session(args.model, args.threads)),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
    )


if __name__ == "__main__":
    main()
