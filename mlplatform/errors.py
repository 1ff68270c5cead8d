"""Errors the CLI turns into exit code 2: bad config, flags or files, one printable line per problem."""

from __future__ import annotations


class InputError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
