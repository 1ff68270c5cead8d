"""The Open Inference Protocol (V2) beside /v1, on the real server: what KServe and Triton clients send
and expect (KServe "Open Inference Protocol (V2 Inference Protocol)", HTTP/REST), and /openapi.json."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.training.tasks import Split

from .serving import Server, metric_samples

N_FEATURES = 64


def v2_request(rows: np.ndarray, nested: bool = False) -> dict[str, object]:
    data = rows.tolist() if nested else rows.ravel().tolist()
    tensor = {"name": "features", "shape": list(rows.shape), "datatype": "FP32", "data": data}
    return {"id": "req-7", "inputs": [tensor], "outputs": [{"name": "logits"}]}


def test_health_and_model_metadata(server: Server) -> None:
    with server.client() as client:
        live, ready = client.get("/v2/health/live"), client.get("/v2/health/ready")
        model_ready = client.get("/v2/models/digits/ready")
        version_ready = client.get("/v2/models/digits/versions/1/ready")
        metadata = client.get("/v2/models/digits").json()
        properties = metadata.pop("properties")
        unknown = client.get("/v2/models/iris")
        wrong_version = client.get("/v2/models/digits/versions/2/ready")
    assert (live.status_code, live.json()) == (200, {"live": True})
    assert (ready.status_code, ready.json()) == (200, {"ready": True})
    assert model_ready.status_code == version_ready.status_code == 200
    assert metadata == {
        "name": "digits",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, N_FEATURES]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}],
    }
    assert unknown.status_code == wrong_version.status_code == 404
    assert "unknown model 'iris'" in unknown.json()["error"]
    # What warm-up chose, as the spec's optional model properties (string to string; kserve/
    # open-inference-protocol open_inference_rest.yaml, metadata_model_response.properties), and the
    # same on /metrics: an fp32 version runs at fp32, on one of the engines.
    assert set(properties) == {"engine", "precision", "threads", "spinning"}
    assert properties["engine"] in {"onnxruntime", "openvino"} and properties["precision"] == "fp32"
    labels = tuple(sorted({"model": "digits", "version": "1", **properties}.items()))
    assert metric_samples(server)["inference_engine_info", labels] == 1


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_infer_returns_the_same_predictions_as_v1(server: Server, held_out: Split, nested: bool) -> None:
    rows = held_out.x_test[:7].astype(np.float32)
    with server.client() as client:
        v1 = client.post("/v1/predict", json={"instances": rows.tolist()}).json()
        response = client.post("/v2/models/digits/infer", json=v2_request(rows, nested))
        by_version = client.post("/v2/models/digits/versions/1/infer", json=v2_request(rows, nested))
    assert response.status_code == by_version.status_code == 200, response.text
    body = response.json()
    assert (body["model_name"], body["model_version"], body["id"]) == ("digits", "1", "req-7")
    [output] = body["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("logits", "FP32", [7, 10])
    scores = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    assert scores.argmax(axis=1).tolist() == v1["predictions"]
    np.testing.assert_allclose(scores, np.asarray(v1["scores"]), rtol=1e-5, atol=1e-5)
    assert by_version.json()["outputs"] == body["outputs"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"datatype": "INT64"}, "inputs[0].datatype"),
        ({"name": "pixels"}, "inputs[0].name"),
        ({"shape": [1, 63]}, "inputs[0].shape"),
        ({"data": [0.0] * 10}, "inputs[0].data"),
        ({"data": [1e39] + [0.0] * (N_FEATURES - 1)}, "inputs[0].data[0]"),
        ({"data": [True] + [0.0] * (N_FEATURES - 1)}, "inputs[0].data[0]"),
    ],
)
def test_bad_tensors_are_a_422_naming_the_field(
    server: Server, change: dict[str, object], field: str
) -> None:
    request = v2_request(np.zeros((1, N_FEATURES), dtype=np.float32))
    request["inputs"][0].update(change)  # type: ignore[index]
    with server.client() as client:
        response = client.post("/v2/models/digits/infer", json=request)
    assert response.status_code == 422
    assert response.json()["error"].startswith(field), response.json()


def test_openapi_document_describes_both_protocols(server: Server) -> None:
    with server.client() as client:
        document = client.get("/openapi.json").json()
        docs = client.get("/docs")
    assert document["openapi"].startswith("3.")
    assert {"/v1/predict", "/v2/models/{name}/infer", "/v2/models/{name}", "/v2/health/ready"} <= set(
        document["paths"]
    )
    body = document["paths"]["/v2/models/{name}/infer"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/V2InferRequest"}
    schemas = document["components"]["schemas"]
    assert {"PredictRequest", "V2InferRequest", "V2Tensor", "V2InferResponse"} <= set(schemas)
    assert docs.status_code == 404, "interactive docs stay off"
