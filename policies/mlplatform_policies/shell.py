"""The ``az`` invocations in a local command's shell line (pulumi-command ``command:local:Command``'s
``create``/``update``/``delete``), read as the shell splits them: words (POSIX quoting), with ``&&``,
``||``, ``;``, ``|`` and ``&`` ending an invocation."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})


def az_invocations(command: str) -> Iterator[list[str]]:
    """Each ``az ...`` invocation's words; nothing for a line that does not parse."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _SHELL_OPERATORS:
            words.append(token)
            continue
        if words[:1] == ["az"]:
            yield words
        words = []


def option(words: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` given (``--name X`` or ``--name=X``)."""
    for index, word in enumerate(words):
        for name in names:
            if word == name and index + 1 < len(words):
                return words[index + 1]
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None
