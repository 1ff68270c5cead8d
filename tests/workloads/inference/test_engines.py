"""How a version runs: the engine, threads and spinning measured at warm-up, the version's own precision,
and what each engine needs (OpenVINO, native bf16)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from workloads.artifacts import METADATA_FILE, ArtifactError, ModelMetadata, load_metadata
from workloads.inference import engines, warmup
from workloads.inference.config import ServeConfig, openvino_installed
from workloads.inference.cpu import available_cpus, native_bf16
from workloads.inference.drift import DriftMonitor
from workloads.inference.engines import EngineChoice, open_runner
from workloads.inference.metrics import Metrics
from workloads.inference.model import OnnxModel, load_artifact, verify_model
from workloads.inference.warmup import Measured, build_model, candidates, choose, spinning_fits, thread_counts
from workloads.training.tasks import Split

ORT_1 = EngineChoice("onnxruntime", "fp32", 1, False)
ORT_2 = EngineChoice("onnxruntime", "fp32", 2, False)
ORT_2_SPIN = EngineChoice("onnxruntime", "fp32", 2, True)
OV_2 = EngineChoice("openvino", "fp32", 2)


def timed(**seconds: float) -> list[Measured]:
    named = {"ort_1": ORT_1, "ort_2": ORT_2, "ort_2_spin": ORT_2_SPIN, "ov_2": OV_2}
    return [Measured(named[name], s) for name, s in seconds.items()]


def test_the_fastest_candidate_is_chosen() -> None:
    """A model-bound run (the 50M-weight MLP): two threads, or OpenVINO, win when measured faster."""
    assert choose(timed(ort_2=8.5e-3, ort_2_spin=8.8e-3, ov_2=9e-3, ort_1=14e-3)).choice == ORT_2
    assert choose(timed(ort_2=8.5e-3, ov_2=6e-3, ort_1=14e-3)).choice == OV_2
    assert choose(timed(ort_2=8.5e-3, ort_2_spin=5e-3)).choice == ORT_2_SPIN


def test_timing_noise_does_not_buy_threads_or_spinning() -> None:
    """Within 5 % (or 10 µs) of the fastest, the simplest wins: no spinning, fewest threads, ONNX Runtime."""
    assert choose(timed(ort_2=8.5e-3, ort_2_spin=8.3e-3, ov_2=8.4e-3, ort_1=8.6e-3)).choice == ORT_1
    assert choose(timed(ort_2=8.5e-3, ort_2_spin=8.2e-3, ov_2=8.4e-3, ort_1=12e-3)).choice == ORT_2
    # The digits model: microseconds apart is noise next to a request's HTTP handling.
    assert choose(timed(ort_2=9e-6, ort_2_spin=8e-6, ov_2=70e-6, ort_1=12e-6)).choice == ORT_1


def test_the_budget_and_one_thread_are_measured_first_and_whatever_the_budget(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 42: on shared cores one thread can beat the budget (the 50M-weight model under wrk: 22.5 against
    28.7 ms a row), and a budget spent by the first candidate (a large model under load) had left it
    unmeasured. Planted: a budget of 0 s."""
    assert [(c.threads, c.spinning) for c in candidates("fp32", None, 6, openvino=False, cpus=6)][:2] == [
        (6, False),
        (1, False),
    ]
    with caplog.at_level(logging.INFO, logger="workloads.inference"):
        build_model(load_artifact(model_dir), 2, ServeConfig(model_dir=model_dir, choice_budget_s=0))
    assert "measured 2 of" in caplog.text
    assert "onnxruntime fp32, 2 threads, spinning off" in caplog.text
    assert "onnxruntime fp32, 1 thread, spinning off" in caplog.text


def test_a_neighbour_s_burst_during_one_candidate_s_runs_does_not_decide_the_choice(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: timed one after the other, a burst of load beside the one-thread candidate's runs (on 2
    shared cores: 10.5 ms a row steady, 19-23 ms for 0.15 s at a time) chose two threads that served
    slower. Planted: both candidates cost 10 ms a row on a simulated clock, and every run from the 19th
    on (the one-thread candidate's, timed one after the other) takes 20 ms. Timed in pairs, the burst
    falls on both alike, and the simpler, one thread, is chosen."""
    now = [0.0]
    calls = [0]
    real_predict = OnnxModel.predict

    def predict(self: OnnxModel, x: np.ndarray) -> np.ndarray:
        calls[0] += 1
        now[0] += 20e-3 if calls[0] >= 19 else 10e-3
        return real_predict(self, x)

    monkeypatch.setattr(OnnxModel, "predict", predict)
    monkeypatch.setattr(warmup, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    model = build_model(load_artifact(model_dir), 2, ServeConfig(model_dir=model_dir, choice_budget_s=0))
    assert model.choice == ORT_1


def test_a_server_pinned_to_an_engine_measures_only_its_threads(
    model_dir: Path, int8_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``SERVE_ENGINE`` (``--engine``) runs every version on the named engine: only its thread counts are
    candidates, and with a budget of 1 the one candidate serves. A version published for the other engine
    is refused, not run elsewhere (int8 graphs run on ONNX Runtime only, quantize.py)."""
    pinned = ServeConfig(model_dir=model_dir, engine="onnxruntime")
    with caplog.at_level(logging.INFO, logger="workloads.inference"):
        assert build_model(load_artifact(model_dir), 2, pinned).choice.engine == "onnxruntime"
    assert "openvino" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="workloads.inference"):
        assert build_model(load_artifact(model_dir), 1, pinned).choice == ORT_1
    assert "measured 1 of 1 candidates" in caplog.text
    if not openvino_installed():
        pytest.skip("OpenVINO is not installed: a server cannot be pinned to it")
    with pytest.raises(
        RuntimeError, match=r"^version 1-int8 \(int8\) runs on onnxruntime, not on the engine"
    ):
        build_model(load_artifact(int8_dir), 1, ServeConfig(model_dir=int8_dir, engine="openvino"))
    assert build_model(
        load_artifact(model_dir), 1, ServeConfig(model_dir=model_dir, engine="openvino")
    ).choice == (EngineChoice("openvino", "fp32", 1))


def test_candidates_keep_the_version_s_precision() -> None:
    """fp32 is never run in bf16; int8 runs on ONNX Runtime, bf16 on OpenVINO, each at its own precision."""
    fp32 = candidates("fp32", None, 2, openvino=True, cpus=4)
    assert fp32 == [ORT_2, ORT_1, OV_2, ORT_2_SPIN, EngineChoice("openvino", "fp32", 1)]
    assert candidates("fp32", None, 2, openvino=False, cpus=4) == [ORT_2, ORT_1, ORT_2_SPIN]
    assert {c.engine for c in candidates("int8", "onnxruntime", 4, openvino=True, cpus=4)} == {"onnxruntime"}
    bf16 = candidates("bf16", "openvino", 4, openvino=True, cpus=4)
    assert {(c.engine, c.precision) for c in bf16} == {("openvino", "bf16")}
    assert [c.threads for c in bf16] == [4, 1, 2]
    assert thread_counts(1) == [1] and thread_counts(6) == [6, 1, 2, 4]


def spinning(choices: list[EngineChoice]) -> list[int]:
    return [c.threads for c in choices if c.spinning]


def test_no_pool_spins_on_every_cpu_the_process_may_use() -> None:
    """Issue 42: spinning pool threads never sleep under load ("spin waiting for work ... consumes more
    CPU cycles": ONNX Runtime docs, Thread management), so at a thread count that takes every CPU they
    keep the cores the event loop needs; an idle warm-up cannot see that (the 1.1M-weight model, 2 cores:
    2 threads spinning 44 µs a row against 66 µs on 1, then 116-138 req/s served under wrk against
    408-622 on 1 thread). Spinning is offered only where a whole CPU stays free beside every worker; a
    spin within runs alone (``session.force_spinning_stop``) still lost at every CPU under load (2 threads
    pinned, the 1.1M-weight model at one client: 319 req/s against 947 not spinning, medians)."""
    # This machine's case: 2 CPUs, a budget of 2: no spinning candidate at all, the sleeping ones kept.
    assert candidates("fp32", None, 2, openvino=False, cpus=2) == [ORT_2, ORT_1]
    assert spinning(candidates("int8", "onnxruntime", 2, openvino=False, cpus=2)) == []
    # 8 CPUs, one worker, a budget of 8: 2 and 4 threads may spin, 8 may not.
    assert spinning(candidates("fp32", None, 8, openvino=False, cpus=8)) == [2, 4]
    # 8 CPUs over 2 workers, 4 threads each: 4 x 2 is every CPU; 2 x 2 leaves four.
    assert spinning(candidates("fp32", None, 4, openvino=False, cpus=8, workers=2)) == [2]
    # A budget set above the CPUs (SERVE_THREADS) never spins; one thread has no pool to spin.
    assert not spinning_fits(4, cpus=2, workers=1) and not spinning_fits(1, cpus=8, workers=1)
    assert spinning_fits(2, cpus=3, workers=1)


def gap_busy(run: engines.Runner, row: np.ndarray, gap_s: float = 0.05) -> float:
    """The median share of a core the process takes in a ``gap_s`` pause after each of three runs."""
    busy = []
    for _ in range(3):
        run(row)
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(gap_s)
        busy.append((time.process_time() - cpu) / (time.perf_counter() - wall))
    return float(np.median(busy))


def wide_matmul(width: int = 1024) -> bytes:
    """A one-operator graph wide enough (``width`` squared weights) for ONNX Runtime to split a one-row
    run over its pool; the digits model's operators are too small to wake a pool thread at all."""
    weights = numpy_helper.from_array(np.ones((width, width), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, width])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    serialized: bytes = model.SerializeToString()
    return serialized


def test_a_spinning_pool_sleeps_once_its_run_returns() -> None:
    """ONNX Runtime's ``session.force_spinning_stop``: "forces any TP threads spinning stop immediately
    when the last of concurrent Run() call returns" (``onnxruntime_session_options_config_keys.h``).
    Without it an idle pool thread spins 2^20 pause instructions (3 to 47 ms by CPU, ONNX Runtime PR
    #27916) after each run, into the gap before the next request (planted below: measured here about a
    third of a core over a 50 ms gap); with it the process takes no CPU there."""
    graph, row = wide_matmul(), np.ones((1, 1024), dtype=np.float32)
    spinning = EngineChoice("onnxruntime", "fp32", 2, True)
    assert gap_busy(open_runner(graph, spinning), row) < 0.02
    planted = engines.session_options(2, spinning=True)
    planted.add_session_config_entry("session.force_spinning_stop", "0")
    session = ort.InferenceSession(graph, planted, providers=["CPUExecutionProvider"])
    assert gap_busy(lambda x: session.run(None, {"x": x})[0], row) > 0.05


CPUINFO = "processor\t: {n}\nflags\t\t: fpu sse2 avx2 avx512f {extra}\n\n"


@pytest.mark.parametrize(
    ("extras", "native"),
    [(["amx_bf16", "amx_bf16"], True), (["avx512_bf16", "avx512_bf16"], True), (["", ""], False)],
)
def test_native_bf16_reads_the_cpu_flags(tmp_path: Path, extras: list[str], native: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("".join(CPUINFO.format(n=n, extra=e) for n, e in enumerate(extras)))
    assert native_bf16(cpuinfo) is native
    assert native_bf16(tmp_path / "absent") is False


def test_metadata_written_before_precision_existed_still_loads(model_dir: Path, tmp_path: Path) -> None:
    """An fp32 version without the fields is fp32, chosen at warm-up; an int8 one says so in its
    hyperparameters and runs on ONNX Runtime."""
    raw = json.loads((model_dir / METADATA_FILE).read_text())
    old = {k: v for k, v in raw.items() if k not in ("precision", "engine")}
    fp32 = ModelMetadata.model_validate(old)
    assert (fp32.precision, fp32.engine) == ("fp32", None)
    old_int8 = {**old, "hyperparameters": {**old["hyperparameters"], "quantization": {"weight_type": "int8"}}}
    int8 = ModelMetadata.model_validate(old_int8)
    assert (int8.precision, int8.engine) == ("int8", "onnxruntime")


def test_a_real_warm_up_chooses_from_measurement_and_keeps_fp32_outputs(
    model_dir: Path, held_out: Split, caplog: pytest.LogCaptureFixture
) -> None:
    artifact = load_artifact(model_dir)
    heard: list[EngineChoice] = []
    with caplog.at_level(logging.INFO, logger="workloads.inference"):
        model = build_model(artifact, 2, ServeConfig(model_dir=model_dir), heard.append)
    assert heard == [model.choice] and model.choice.precision == "fp32"
    assert model.choice in candidates("fp32", None, 2, openvino_installed(), cpus=available_cpus())
    assert "warm-up chose" in caplog.text and "measured" in caplog.text
    reference = open_runner(artifact.onnx_bytes, ORT_1)(held_out.x_test)
    got = model.predict(held_out.x_test)
    assert np.max(np.abs(got - reference)) <= warmup.TOLERANCE["fp32"] * np.max(np.abs(reference))
    assert (got.argmax(axis=1) == reference.argmax(axis=1)).all()


def test_outputs_match_with_their_non_finite_values_in_place() -> None:
    """A version answering NaN for some rows is still served (its requests get 422, counted as its
    errors: the rollout's error gate, issue 29), so candidates are compared NaN for NaN, inf for inf."""
    reference = np.array([[1.0, np.nan], [np.inf, 2.0]], dtype=np.float32)
    assert warmup.within(reference + np.float32(1e-6), reference, 1e-4)
    assert not warmup.within(np.array([[1.0, 0.0], [np.inf, 2.0]], dtype=np.float32), reference, 1e-4)
    assert not warmup.within(np.array([[1.0, np.nan], [-np.inf, 2.0]], dtype=np.float32), reference, 1e-4)
    assert not warmup.within(np.array([[1.5, np.nan], [np.inf, 2.0]], dtype=np.float32), reference, 1e-4)
    assert warmup.within(np.full((2, 2), np.nan, np.float32), np.full((2, 2), np.nan, np.float32), 1e-4)


def test_a_candidate_with_other_outputs_is_never_chosen(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted: every candidate after the first (the reference) gives shifted outputs, however fast."""
    real = engines.open_runner
    opened: list[EngineChoice] = []

    def shifted(onnx_bytes: bytes, choice: EngineChoice, **kw: object) -> engines.Runner:
        run = real(onnx_bytes, choice, **kw)
        opened.append(choice)
        return run if len(opened) == 1 else (lambda x: run(x) + 1.0)

    monkeypatch.setattr("workloads.inference.model.open_runner", shifted)
    model = build_model(load_artifact(model_dir), 2, ServeConfig(model_dir=model_dir))
    assert len(opened) > 1 and model.choice == opened[0]


def test_a_bf16_version_runs_on_openvino_at_bf16_close_to_fp32(
    model_dir: Path, bf16_dir: Path, held_out: Split
) -> None:
    meta = load_metadata(bf16_dir)
    assert (meta.precision, meta.engine, meta.parent_version) == ("bf16", "openvino", "1")
    model = build_model(load_artifact(bf16_dir), 2, ServeConfig(model_dir=bf16_dir))
    assert (model.choice.engine, model.choice.precision) == ("openvino", "bf16")
    reference = open_runner(load_artifact(model_dir).onnx_bytes, ORT_1)(held_out.x_test)
    got = model.predict(held_out.x_test)
    assert np.max(np.abs(got - reference)) <= warmup.TOLERANCE["bf16"] * np.max(np.abs(reference))


def test_a_bf16_version_is_refused_where_the_cpu_has_no_native_bf16(
    bf16_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not served at fp32 instead: its accuracy was measured at bf16, and its parent is the fp32 version."""
    monkeypatch.setattr(engines, "native_bf16", lambda: False)
    with pytest.raises(ArtifactError) as refused:
        verify_model(load_artifact(bf16_dir), bf16_dir)
    message = str(refused.value)
    assert "\n" not in message
    assert "openvino at bf16" in message and "no native bf16" in message and "parent version 1" in message
    with pytest.raises(
        RuntimeError, match=r"no engine runs version 1-bf16 \(bf16\) here: this CPU has no native bf16"
    ):
        build_model(load_artifact(bf16_dir), 2, ServeConfig(model_dir=bf16_dir))


def test_the_engine_metric_follows_the_loaded_versions(model_dir: Path) -> None:
    """Each loaded version's choice shows while it is loaded (champion or challenger); an unloaded one
    says 0, and a version promoted in place keeps its row."""
    meta = load_metadata(model_dir)
    drift = DriftMonitor(meta.reference_histograms, window=100, threshold=0.2, min_samples=50)
    metrics = Metrics(model="digits", max_batch_size=32, drift=lambda: [("1", drift)])

    def rows() -> dict[tuple[str, ...], float]:
        return {
            tuple(s.labels[k] for k in ("version", "engine", "threads", "spinning")): s.value
            for family in metrics.registry.collect()
            if family.name == "inference_engine_info"
            for s in family.samples
        }

    metrics.engine("1", ORT_2)
    assert rows() == {("1", "onnxruntime", "2", "off"): 1}
    metrics.engine("2", OV_2)  # version 2 loaded as the challenger beside 1
    assert rows() == {("1", "onnxruntime", "2", "off"): 1, ("2", "openvino", "2", "n/a"): 1}
    metrics.engine("1", None)  # 2 promoted in place, 1 unloaded
    assert rows() == {("1", "onnxruntime", "2", "off"): 0, ("2", "openvino", "2", "n/a"): 1}
