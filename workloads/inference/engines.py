"""The engines that run a version's ONNX graph on the CPU: ONNX Runtime, and OpenVINO's CPU runtime.

Both read the verified ``model.onnx`` bytes themselves (no conversion step, no second file). ONNX Runtime
runs every version: fp32, and the int8 graphs ``quantize.py`` writes. OpenVINO is optional (the server
imports and serves without it): it runs an fp32 version in f32 when warm-up measures it faster, and a
version published at bf16 (``quantize.py --precision bf16``), which needs it and a CPU with native bf16.

OpenVINO properties (OpenVINO 2026.4, ``openvino.properties``; docs.openvino.ai "CPU Device" and
"Performance Hints and Thread Scheduling"): ``INFERENCE_PRECISION_HINT`` (``f32`` / ``bf16``; on a CPU
with native bf16 the CPU plugin's default is bf16, so f32 is always set explicitly),
``INFERENCE_NUM_THREADS`` and ``PERFORMANCE_HINT`` ``LATENCY`` (one stream: one request at a time, which
is how the batcher calls it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from workloads.artifacts import Engine, Precision
from workloads.inference.config import OPENVINO_MISSING, openvino_installed
from workloads.inference.cpu import native_bf16

Array = npt.NDArray[np.float32]
Runner = Callable[[Array], Array]

# OpenVINO's names for the precisions it is asked to compute at.
_OPENVINO_PRECISION = {"fp32": "f32", "bf16": "bf16"}


@dataclass(frozen=True)
class EngineChoice:
    """How a version runs: the engine, the precision (always the version's own), the intra-op threads,
    and whether ONNX Runtime's idle pool threads spin (None for OpenVINO, which has no such switch)."""

    engine: Engine
    precision: Precision
    threads: int
    spinning: bool | None = None

    @property
    def label(self) -> str:
        spin = "" if self.spinning is None else f", spinning {'on' if self.spinning else 'off'}"
        return f"{self.engine} {self.precision}, {self.threads} thread{'s' * (self.threads > 1)}{spin}"

    def properties(self) -> dict[str, str]:
        """The choice as string pairs: V2 model metadata ``properties`` and the metric's labels."""
        spinning = "n/a" if self.spinning is None else ("on" if self.spinning else "off")
        return {
            "engine": self.engine,
            "precision": self.precision,
            "threads": str(self.threads),
            "spinning": spinning,
        }


def unavailable(engine: Engine, precision: Precision) -> str | None:
    """Why ``engine`` cannot run ``precision`` here, or None when it can."""
    if engine == "onnxruntime":
        return "ONNX Runtime runs fp32 and int8 graphs, not bf16" if precision == "bf16" else None
    if precision not in _OPENVINO_PRECISION:
        return f"OpenVINO does not run the {precision} graphs this platform writes"
    if not openvino_installed():
        return OPENVINO_MISSING
    if precision == "bf16" and not native_bf16():
        return "this CPU has no native bf16 (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo)"
    return None


def session_options(threads: int, *, spinning: bool = False) -> ort.SessionOptions:
    """An ONNX Runtime session with ``threads`` intra-op threads, run sequentially.

    ``spinning``: the pool threads busy-wait for work within a run (between one operator's parallel
    section and the next) and sleep once it returns. ``session.intra_op.allow_spinning`` (ONNX Runtime
    docs, "Thread management"; on by default there) lets idle pool threads busy-wait instead of sleeping;
    alone, they go on spinning after the run (2^20 pause instructions, 3 to 47 ms by CPU: ONNX Runtime PR
    #27916), through the gap to the next request, on the cores the event loop parses requests on.
    ``session.force_spinning_stop`` ("forces any TP threads spinning stop immediately when the last of
    concurrent Run() call returns. Spinning is restarted on the next Run() call": ONNX Runtime's
    ``onnxruntime_session_options_config_keys.h``, in the installed 1.31.1) ends that: measured on the
    50M-weight model with a 2 ms gap after each run, 2 threads spinning kept 1.00 of a core busy in the
    gap, with the stop 0.02, as without spinning. Warm-up measures whether spinning pays for the model
    at hand.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if spinning:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def open_runner(onnx_bytes: bytes, choice: EngineChoice, *, openvino_model: Any = None) -> Runner:
    """A function running one batch on ``choice``'s engine; raises ``RuntimeError`` (one line) where the
    engine cannot run here. ``openvino_model``: the graph already read by OpenVINO (``read_openvino``),
    so that several OpenVINO candidates read the bytes once."""
    reason = unavailable(choice.engine, choice.precision)
    if reason is not None:
        raise RuntimeError(f"{choice.label}: {reason}")
    if choice.engine == "onnxruntime":
        return _ort_runner(onnx_bytes, choice)
    return _openvino_runner(openvino_model or read_openvino(onnx_bytes), choice)


def _ort_runner(onnx_bytes: bytes, choice: EngineChoice) -> Runner:
    session = ort.InferenceSession(
        onnx_bytes,
        sess_options=session_options(choice.threads, spinning=bool(choice.spinning)),
        providers=["CPUExecutionProvider"],
    )
    names = [session.get_outputs()[0].name]
    feed = session.get_inputs()[0].name

    def run(x: Array) -> Array:
        out: Array = session.run(names, {feed: x})[0]
        return out

    return run


def read_openvino(onnx_bytes: bytes) -> Any:
    """The ONNX graph read by OpenVINO's ONNX frontend, from the verified bytes."""
    import openvino

    return openvino.Core().read_model(onnx_bytes)


def _openvino_runner(model: Any, choice: EngineChoice) -> Runner:
    import openvino

    compiled = openvino.Core().compile_model(
        model,
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": _OPENVINO_PRECISION[choice.precision],
            "INFERENCE_NUM_THREADS": choice.threads,
            "PERFORMANCE_HINT": "LATENCY",
        },
    )
    request = compiled.create_infer_request()
    # An infer request runs one inference at a time; runs are serialised by the batcher already, but
    # may come from the event loop's thread or the model thread, so the request is held under a lock.
    lock = threading.Lock()

    def run(x: Array) -> Array:
        with lock:
            request.infer({0: x})
            # The output tensor is the request's own buffer, overwritten by the next run: copy it out.
            return np.array(request.get_output_tensor(0).data, dtype=np.float32)

    return run
