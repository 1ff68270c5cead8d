"""Stack and project files read as the Pulumi CLI reads them, so a plan sees the values ``pulumi up`` will.

The CLI is Go and reads YAML with go-yaml v3, which "supports most of YAML 1.2" (its README,
Compatibility): booleans are ``true``/``false`` only, and the YAML 1.1 ``yes``/``no``/``on``/``off`` are
strings unless decoded into a typed bool (config values are not typed); base-60 numbers (``12:30``) are
not numbers. PyYAML implements YAML 1.1, where all of those are booleans or integers. YAML 1.2 also says
mapping keys "MUST be unique" (spec 1.2.2, section 3.2.1.1), and PyYAML silently keeps the second of two;
here a duplicate is an error naming the key and both lines. A file that is not UTF-8 is named, not a
traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from mlplatform.errors import InputError

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans and numbers, refusing duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise _Duplicate(key, first[key], line)
            except TypeError:  # an unhashable key: PyYAML's own error says so
                continue
            first[key] = line
        return super().construct_mapping(node, deep)


class _Duplicate(yaml.YAMLError):
    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(f"line {again}: key {key!r} is given twice (first on line {first}); keep one")


# YAML 1.2 (core schema) resolvers in place of 1.1's for booleans, integers and floats; the rest is PyYAML's.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# 0777 stays octal, as go-yaml v3 keeps it (its README); 0o777 is YAML 1.2's spelling of the same.
_Loader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def loads(text: str, name: str) -> Any:
    """``text`` (from the file ``name``) as the Pulumi CLI reads it; bad YAML is one ``InputError`` line."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _Duplicate as exc:
        raise InputError([f"{name}: {exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise InputError([f"{name}:{where} not valid YAML ({problem})"]) from None


def load(path: Path) -> Any:
    """The YAML file at ``path``, read as UTF-8 as Pulumi does; unreadable or not UTF-8 is one line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError([f"{path}: cannot read ({exc.strerror})"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            [f"{path.name}: line {line}: byte 0x{data[exc.start]:02x} is not UTF-8; save the file as UTF-8"]
        ) from None
    return loads(text, path.name)
