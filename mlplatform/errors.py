"""Errors the CLI turns into exit code 2: bad config, flags or files, one printable line per problem."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

EXIT_FINDING = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems

    def __reduce__(self) -> tuple[type[InputError], tuple[list[str]]]:
        # Pickled with its lines, not their join: it crosses processes (mlplatform.parallel).
        return (InputError, (self.problems,))


def report(problems: list[str]) -> None:
    """Print each problem on its own stderr line."""
    for line in problems:
        print(f"error: {line}", file=sys.stderr)


def warn(lines: list[str]) -> None:
    """Print each warning on its own stderr line: something the user should fix, not a failure."""
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)


def exit_with(problems: list[str], code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print each problem on its own stderr line and leave with ``code``; no traceback."""
    report(problems)
    raise typer.Exit(code)
