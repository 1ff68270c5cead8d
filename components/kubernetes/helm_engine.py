"""Helm's engine in a process of its own: what the chart cache (``charts.render``, ``charts.verify``) asks
of Helm, answered by a child process.

helm-python-sdk binds Helm's Go SDK with ctypes, so importing it starts Go's runtime (its threads and
signal handlers) inside the importing process, for that process's life. Test workers, which plan a
hundred stacks each, died several times with no Python traceback while planning; the cause is not
established, Go's runtime sharing the process is the suspect, and Go reports its own fatal errors on file
descriptor 2, which pytest captures per test and drops with the process. So no planning process loads
Go: the first request starts ``python -m components.kubernetes.helm_engine``, which serves requests one
JSON line at a time on its stdin and stdout for the rest of the caller's life, and ends when the caller
closes its stdin (at exit, or when the caller dies). A child that died is started again for the next
request, and the request it died on is one error naming its exit status.

Requests and answers (each one JSON line):
- ``{"op": "render", "path", "values", "release", "namespace"}``: ``{"manifests": {template path: text},
  "crds": [text, ...]}``, as ``Chart.render`` (an install: ``is_install``) and ``Chart.crds`` give them;
- ``{"op": "metadata", "path"}``: ``{"metadata": Chart.yaml's fields}``;
- ``{"op": "pull", "reference", "repo", "version", "destination"}``: ``{}`` once Helm has written the
  package into ``destination`` (``helm_python.pull``: an OCI reference has no repository URL);
- either may answer ``{"error": "..."}``: Helm refused (``helm_python.HelmError``), raised here as
  ``HelmError``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any


class HelmError(Exception):
    """Helm refused the request (its message), or its process ended while answering."""


class _Engine:
    """The child process, started on first use and again after it died; one request at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except OSError:
                line = ""
            if not line:
                status = process.wait()
                self._process = None
                raise HelmError(f"Helm's engine process ended with status {status} while answering")
            answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise HelmError(str(answer["error"]))
        return answer

    def _running(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
            )
        return self._process

    def close(self) -> None:
        """Close the child's stdin, so it ends, and reap it."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_ENGINE = _Engine()
# The child ends with the caller: here at a normal exit, by the end of its stdin otherwise.
close = _ENGINE.close
atexit.register(close)


def render(
    path: Path, values: dict[str, Any], release: str, namespace: str
) -> tuple[dict[str, str], list[str]]:
    """The chart's templates rendered as an install (template path → text) and its ``crds/`` files."""
    answer = _ENGINE.ask(
        {"op": "render", "path": str(path), "values": values, "release": release, "namespace": namespace}
    )
    return dict(answer["manifests"]), list(answer["crds"])


def pull(reference: str, repo: str | None, version: str, destination: Path) -> None:
    """Helm pulls ``reference`` at ``version`` (from ``repo``; None for OCI) into ``destination``."""
    request = {"op": "pull", "reference": reference, "repo": repo, "version": version}
    _ENGINE.ask(request | {"destination": str(destination)})


def metadata(path: Path) -> dict[str, Any]:
    """The packaged chart's ``Chart.yaml`` fields, as Helm loads them."""
    return dict(_ENGINE.ask({"op": "metadata", "path": str(path)})["metadata"])


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """One request, in the child."""
    import helm_python

    try:
        if request["op"] == "pull":
            destination = request["destination"]
            helm_python.pull(
                request["reference"],
                repo_url=request["repo"],
                version=request["version"],
                destination=destination,
            )
            return {}
        with helm_python.Chart.load(Path(request["path"])) as chart:
            if request["op"] == "metadata":
                return {"metadata": dict(chart.metadata)}
            manifests = chart.render(
                request["values"], name=request["release"], namespace=request["namespace"], is_install=True
            )
            return {"manifests": dict(manifests), "crds": [str(crd["data"]) for crd in chart.crds]}
    except helm_python.HelmError as error:
        return {"error": str(error).strip() or type(error).__name__}


def serve(requests: IO[str], answers: IO[str]) -> None:
    """The child: answer each request line until the caller closes its end."""
    for line in requests:
        answers.write(json.dumps(_answer(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    # Answers go to a private copy of stdout; whatever Go or Helm might print goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    serve(sys.stdin, answers)
