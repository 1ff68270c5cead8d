"""The CPU inference service: ONNX Runtime behind FastAPI, with micro-batching, drift scores and drain.

``python -m workloads.inference`` runs it (the container), ``mlplatform serve`` runs it locally,
``workloads.inference.k8s.inference_objects`` describes it to Kubernetes, and
``python -m workloads.inference.quantize`` makes the int8 version of a model.
"""
