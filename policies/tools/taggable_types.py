"""Regenerate ``mlplatform_policies/taggable_types.txt`` from the installed provider SDKs.

A policy sees only the inputs a program set, so an untagged resource looks the same whether its type
takes tags or not; the pack needs the schema fact "this type is taggable", and cannot load provider
schemas offline. This reads it from the Python SDK sources as text, without importing the huge provider
trees: a resource is taggable when its ``Args`` constructor has a ``tags`` map (a ``tags`` list, as on
a blob legal hold, is something else).

Run with the program's virtualenv, where the provider SDKs live, after a provider upgrade:
``.venv/bin/python policies/tools/taggable_types.py``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

PACKAGES = {"pulumi_aws": "pulumi-aws", "pulumi_azure_native": "pulumi-azure-native"}
OUTPUT = Path(__file__).resolve().parents[1] / "mlplatform_policies" / "taggable_types.txt"
_TOKEN = re.compile(r"super\(\w+, __self__\)\.__init__\(\s*'([a-z-]+:[^']+)'")
_ARGS_INIT = re.compile(r"class \w+Args:\s*\n\s*def __init__\(__self__,(.*?)\):", re.S)
_TAGS_PARAM = re.compile(r"\btags: pulumi\.Input\[Optional\[Mapping\[str,")


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{module} is not installed in this interpreter")
    return Path(spec.origin).parent


def taggable_types(module: str) -> list[str]:
    """Type tokens of the package's resources whose arguments include ``tags``."""
    found: set[str] = set()
    for source in _package_dir(module).rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        token = _TOKEN.search(text)
        args = _ARGS_INIT.search(text)
        if token and args and _TAGS_PARAM.search(args.group(1)):
            found.add(token.group(1))
    return sorted(found)


def main() -> None:
    versions = ", ".join(f"{dist} {importlib.metadata.version(dist)}" for dist in PACKAGES.values())
    lines = [
        f"# Generated from {versions} by policies/tools/taggable_types.py; do not edit.",
        *(token for module in PACKAGES for token in taggable_types(module)),
    ]
    OUTPUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUTPUT}: {len(lines) - 1} taggable types")


if __name__ == "__main__":
    main()
