"""The build context of an image as buildx sends it and pulumi-docker-build hashes it: the files under the
context directory that the Dockerfile's ignore file admits.

- Which ignore file: ``<Dockerfile>.dockerignore`` next to the Dockerfile, else the context's
  ``.dockerignore`` (Docker docs, "Build context", Filename and location; pulumi-docker-build v0.0.22
  ``provider/internal/context.go`` ``getIgnorePatterns``).
- Its lines: moby/patternmatcher v0.6.1 ``ignorefile.ReadAll`` (``#`` comments, trimmed, cleaned, a
  leading ``/`` dropped, ``!`` an exception).
- A path is left out when the last pattern matching it or one of its parent directories is not an
  exception (``PatternMatcher.MatchesOrParentMatches``; patterns compile as ``Pattern.compile``: ``*`` and
  ``?`` stop at ``/``, ``**`` spans directories).
- The walk skips a left-out directory unless an exception names a path below it (tonistiigi/fsutil
  ``filterFS.Walk``, the version pulumi-docker-build v0.0.22 pins).
- The provider's Diff hashes the content, path and mode of every admitted file, regular or symlink
  (``hashBuildContext``, ``hashFile``): a change to any of them is a rebuild and a push.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Characters that make an exception pattern more than a path prefix (fsutil filter.go, patternChars).
_PATTERN_CHARS = frozenset("*[]?^\\")
# Characters patternmatcher escapes when it builds a regular expression (shouldEscape).
_ESCAPED = frozenset(".+()|{}$")


def ignore_file(dockerfile: Path) -> Path:
    """The Dockerfile's own ignore file, which buildx and pulumi-docker-build read first."""
    return dockerfile.with_name(dockerfile.name + ".dockerignore")


def read_patterns(text: str) -> list[str]:
    """An ignore file's patterns, as ``ignorefile.ReadAll`` reads them."""
    patterns: list[str] = []
    for line in text.removeprefix("\ufeff").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        pattern = line.strip()
        invert = pattern.startswith("!")
        pattern = pattern[1:].strip() if invert else pattern
        if pattern:
            pattern = posixpath.normpath(pattern)
            pattern = pattern[1:] if len(pattern) > 1 and pattern.startswith("/") else pattern
        patterns.append("!" + pattern if invert else pattern)
    return patterns


@dataclass(frozen=True)
class _Pattern:
    text: str
    exception: bool
    match: Callable[[str], bool]


def _compile(text: str) -> Callable[[str], bool]:
    """``Pattern.compile`` and ``Pattern.match``: exact, prefix (``a/**``), suffix (``**/a``) or a regexp."""
    regexp, kind, i, position = "^", "exact", 0, 0
    while i < len(text):
        ch = text[i]
        if text.startswith("**", i):
            i += 3 if text.startswith("**/", i) else 2
            if i >= len(text):
                kind, regexp = ("prefix", regexp) if kind == "exact" else ("regexp", regexp + ".*")
            else:
                kind, regexp = "regexp", regexp + "(.*/)?"
            kind = "suffix" if position == 0 else kind
        else:
            i += 1
            if ch == "*":
                kind, regexp = "regexp", regexp + "[^/]*"
            elif ch == "?":
                kind, regexp = "regexp", regexp + "[^/]"
            elif ch in _ESCAPED:
                regexp += "\\" + ch
            elif ch == "\\" and i < len(text):
                kind, regexp, i = "regexp", regexp + "\\" + text[i], i + 1
            elif ch in "[]":
                kind, regexp = "regexp", regexp + ch
            else:
                regexp += ch
        position += 1
    if kind == "exact":
        return lambda path: path == text
    if kind == "prefix":
        return lambda path: path.startswith(text[:-2])
    if kind == "suffix":
        suffix = text[2:]
        return lambda path: path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
    compiled = re.compile(regexp + "$")
    return lambda path: compiled.match(path) is not None


class IgnoreRules:
    """The patterns of one ignore file, answering which context paths it leaves out."""

    def __init__(self, patterns: list[str]) -> None:
        self._patterns: list[_Pattern] = []
        for raw in patterns:
            text = posixpath.normpath(raw.strip())
            exception = text.startswith("!")
            text = text[1:] if exception else text
            self._patterns.append(_Pattern(text, exception, _compile(text)))
        exceptions = [p.text for p in self._patterns if p.exception]
        self._prefixes = [_without_trailing_glob(e) + "/" for e in exceptions]
        self._prefix_only = not any(_PATTERN_CHARS & set(_without_trailing_glob(e)) for e in exceptions)

    def excludes(self, path: str) -> bool:
        """``MatchesOrParentMatches``: the last pattern matching the path or a parent directory decides."""
        matched = False
        parent = posixpath.dirname(path)
        parents = parent.split("/") if parent else []
        for pattern in self._patterns:
            if pattern.exception != matched:
                continue
            hit = pattern.match(path) or any(
                pattern.match("/".join(parents[: i + 1])) for i in range(len(parents))
            )
            if hit:
                matched = not pattern.exception
        return matched

    def walks_into(self, directory: str) -> bool:
        """fsutil's walk: a left-out directory is entered only when an exception may admit a path below it."""
        if not self.excludes(directory) or not self._prefix_only:
            return True
        return any(prefix.startswith(directory + "/") for prefix in self._prefixes)


def _without_trailing_glob(pattern: str) -> str:
    return pattern.removesuffix("/**").removesuffix("/*")


def rules_for(root: Path, dockerfile: Path) -> IgnoreRules:
    """The ignore rules a build of ``dockerfile`` with context ``root`` applies."""
    for candidate in (ignore_file(dockerfile), root / ".dockerignore"):
        if candidate.is_file():
            return IgnoreRules(read_patterns(candidate.read_text()))
    return IgnoreRules([])


def context_files(root: Path, dockerfile: Path) -> list[Path]:
    """Every file the build context holds (and pulumi-docker-build hashes), in a stable order."""
    rules = rules_for(root, dockerfile)
    files: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        base = Path(directory)
        rel = base.relative_to(root).as_posix()
        subdirs[:] = sorted(
            d for d in subdirs if rules.walks_into(posixpath.join(rel, d) if rel != "." else d)
        )
        for name in sorted(names):
            path = base / name
            relative = path.relative_to(root).as_posix()
            if (path.is_file() or path.is_symlink()) and not rules.excludes(relative):
                files.append(path)
    return sorted(files)
