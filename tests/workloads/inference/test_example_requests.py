"""examples/requests: the V1 and V2 request files get the digits they hold (a 0 and a 1) from a real
served digits model, as examples/README.md's curl lines send them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .serving import Server

REQUESTS = Path(__file__).resolve().parents[3] / "examples" / "requests"
HEADERS = {"content-type": "application/json"}


def test_the_v1_request_file_is_predicted_as_the_digits_it_holds(server: Server) -> None:
    with server.client() as client:
        answer = client.post(
            "/v1/predict", content=(REQUESTS / "digits-v1.json").read_bytes(), headers=HEADERS
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["predictions"] == [0, 1]


def test_the_v2_request_file_is_inferred_as_the_digits_it_holds(server: Server) -> None:
    request = (REQUESTS / "digits-v2.json").read_bytes()
    with server.client() as client:
        answer = client.post("/v2/models/digits/infer", content=request, headers=HEADERS)
    assert answer.status_code == 200, answer.text
    (output,) = answer.json()["outputs"]
    assert output["name"] == "logits" and output["shape"] == [2, 10]
    logits = np.asarray(output["data"]).reshape(output["shape"])
    assert logits.argmax(axis=1).tolist() == [0, 1]


def test_the_two_files_hold_the_same_rows() -> None:
    v1 = json.loads((REQUESTS / "digits-v1.json").read_text())["instances"]
    (tensor,) = json.loads((REQUESTS / "digits-v2.json").read_text())["inputs"]
    assert tensor["data"] == v1 and tensor["shape"] == [len(v1), 64]
