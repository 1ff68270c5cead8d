"""``mlplatform serve --model DIR|models:/NAME@ALIAS``: the inference server the cluster runs, here.

The same ``workloads.inference`` server the container starts; flags map one-to-one onto ``ServeConfig``
(the container sets the same settings as ``SERVE_*`` variables). A missing model directory, a file that
does not match its recorded hash, a certificate that is not PEM, a host that cannot be bound, or a bad
flag prints one line each and exits 2 before serving. ``--model models:/<name>@champion`` serves what the
registry's alias names (``--registry-uri``, default ``$MLFLOW_TRACKING_URI``) and follows it as it moves.

Imports only pydantic and typer at module level: the infrastructure install has no ``serve`` extra
(FastAPI, uvicorn, numpy, ONNX Runtime), and the CLI says which extra is missing before it runs this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mlplatform.errors import exit_with
from workloads.inference.config import ServeConfig
from workloads.registry.client import TRACKING_URI_ENV


def _default(field: str) -> Any:
    """The default from ``ServeConfig``, so the flags and the container's settings cannot disagree."""
    return ServeConfig.model_fields[field].default


def _help(field: str) -> str:
    """The setting's own description (ServeConfig), so the flag and the container's variable say the same."""
    return str(ServeConfig.model_fields[field].description)


def _flag(field: str) -> str:
    return "--" + ("model" if field in ("model_dir", "model_uri") else field.replace("_", "-"))


def serve(
    *,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="A model version directory (<output>/models/<name>/<v>), or a registry model: "
            "models:/<name>@<alias> (followed as the alias moves) or models:/<name>/<version>.",
        ),
    ],
    registry_uri: Annotated[
        str | None,
        typer.Option(envvar=TRACKING_URI_ENV, help="The MLflow server a models:/ URI refers to."),
    ] = None,
    poll_interval_s: Annotated[
        float, typer.Option(help="Seconds between checks of a followed alias.")
    ] = _default("poll_interval_s"),
    model_cache_dir: Annotated[
        Path | None, typer.Option(help="Where registry versions are downloaded (default: a temporary one).")
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = _default("host"),
    port: Annotated[int, typer.Option(help="TCP port.")] = _default("port"),
    max_batch_size: Annotated[int, typer.Option(help="Rows per model run.")] = _default("max_batch_size"),
    max_wait_ms: Annotated[float, typer.Option(help="Longest a request waits for a batch.")] = _default(
        "max_wait_ms"
    ),
    max_instances: Annotated[int, typer.Option(help="Rows one request may carry.")] = _default(
        "max_instances"
    ),
    max_queue: Annotated[int, typer.Option(help="Requests held waiting; beyond it, 503.")] = _default(
        "max_queue"
    ),
    deadline_ms: Annotated[
        float, typer.Option(help="Refuse (503) a request that would queue longer than this.")
    ] = _default("deadline_ms"),
    max_connections: Annotated[
        int, typer.Option(help="Connections held at once; beyond it, 503.")
    ] = _default("max_connections"),
    idle_timeout_s: Annotated[float, typer.Option(help=_help("idle_timeout_s"))] = _default("idle_timeout_s"),
    body_timeout_s: Annotated[float, typer.Option(help=_help("body_timeout_s"))] = _default("body_timeout_s"),
    choice_budget_s: Annotated[float, typer.Option(help=_help("choice_budget_s"))] = _default(
        "choice_budget_s"
    ),
    engine: Annotated[str | None, typer.Option(help=_help("engine"), show_default=False)] = None,
    threads: Annotated[
        int | None, typer.Option(help="ONNX Runtime threads per worker (default: CPU limit / workers).")
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Server processes on the port; more than 1 pays off for cheap models.")
    ] = _default("workers"),
    drift_threshold: Annotated[float, typer.Option(help="PSI above which a feature drifted.")] = _default(
        "drift_threshold"
    ),
    drift_window: Annotated[int, typer.Option(help="Input rows kept for drift scoring.")] = _default(
        "drift_window"
    ),
    drift_min_samples: Annotated[
        int | None, typer.Option(help=_help("drift_min_samples"), show_default=False)
    ] = None,
    auth_token_file: Annotated[
        Path | None, typer.Option(help="Require this bearer token on the API and /metrics.")
    ] = None,
    tls_cert_file: Annotated[Path | None, typer.Option(help="Serve HTTPS with this certificate.")] = None,
    tls_key_file: Annotated[Path | None, typer.Option(help="The certificate's private key.")] = None,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
) -> None:
    """Serve a model version over HTTP with micro-batching, drift scores and Prometheus metrics."""
    # Here, not at the top: the CLI imports this module to register the command (see the docstring).
    from workloads.inference.server import BAD_INPUT_ERRORS, bad_input, prepare
    from workloads.inference.workers import run

    try:
        prepared = prepare(
            ServeConfig(
                **({"model_uri": model} if model.startswith("models:/") else {"model_dir": Path(model)}),
                registry_uri=registry_uri,
                poll_interval_s=poll_interval_s,
                model_cache_dir=model_cache_dir,
                host=host,
                port=port,
                max_batch_size=max_batch_size,
                max_wait_ms=max_wait_ms,
                max_instances=max_instances,
                max_queue=max_queue,
                deadline_ms=deadline_ms,
                max_connections=max_connections,
                idle_timeout_s=idle_timeout_s,
                body_timeout_s=body_timeout_s,
                choice_budget_s=choice_budget_s,
                engine=engine,
                threads=threads,
                workers=workers,
                drift_threshold=drift_threshold,
                drift_window=drift_window,
                drift_min_samples=drift_min_samples,
                auth_token_file=auth_token_file,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
                access_log=access_log,
            )
        )
    except BAD_INPUT_ERRORS as exc:
        exit_with(bad_input(exc, _flag))
    raise typer.Exit(run(prepared))
