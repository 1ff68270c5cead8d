"""The ``az`` invocations in a local command's shell line (pulumi-command ``command:local:Command``'s
``create``/``update``/``delete``), read as the shell splits them: words (POSIX quoting), with ``&&``,
``||``, ``;``, ``|`` and ``&`` ending an invocation; and ``az_chain``, the one shape of line whose outcome
is its last ``az`` invocation's."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
# What ``az_chain`` never reads past: a newline or carriage return (a new command, after which ``&&``
# no longer joins), a backquote (command substitution), a backslash (an escaped operator reads as a word)
# and ``#`` (a comment hides the rest of the line).
_REFUSED_CHARACTERS = frozenset("\n\r`\\#")
_PUNCTUATION = frozenset("();<>|&")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\$$")


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


def _words(tokens: list[str]) -> list[str] | None:
    """``tokens`` as the words of one plain ``az`` invocation (quotes removed), or None: no operator, no
    redirection, no grouping, and ``az`` first."""
    words: list[str] = []
    for token in tokens:
        if token[0] in _PUNCTUATION or token in ("{", "}"):
            return None
        unquoted = shlex.split(token)
        if len(unquoted) != 1:
            return None
        words += unquoted
    return words if words[:1] == ["az"] else None


def _step(tokens: list[str]) -> list[str] | None:
    """The ``az`` invocation of one ``&&``-joined step of the platform's lines, or None for any other step.

    A step is a plain ``az ...``; ``NAME=$(az ...)`` (the substitution runs in a subshell: nothing in it
    ends the line); or ``{ [ "$NAME" = WORD ] || az ...; }`` (a test, then the call where it fails)."""
    if len(tokens) > 3 and _ASSIGNMENT.match(tokens[0]) and tokens[1] == "(" and tokens[-1] == ")":
        return _words(tokens[2:-1])
    test = tokens[:7]
    if (
        len(tokens) > 9
        and test[:2] == ["{", "["]
        and test[3] == "="
        and test[5:] == ["]", "||"]
        and tokens[-2:] == [";", "}"]
        and all(t[0] not in _PUNCTUATION for t in (test[2], test[4]))
    ):
        return _words(tokens[7:-2])
    return _words(tokens)


def az_chain(command: str) -> list[list[str]] | None:
    """The ``az`` invocations of a line of the shape the platform's local commands take, in order, or None
    for any other line.

    The shape: steps joined by ``&&`` alone (``_step``), the last one a plain ``az ...``. Such a line exits
    0 only when its last invocation ran and succeeded, so that invocation is the line's outcome. Anything
    else is refused rather than read: ``;``, ``||`` or a newline between steps (``exit 0;`` before it, or
    a branch that never runs), ``exit``/``exec``, functions, conditionals, loops, pipes, background jobs,
    redirections, comments and backquotes (POSIX Shell Command Language, 2.9.3 Lists: an AND list runs
    each command only if the previous one exited 0, and its status is the last command's)."""
    if not command.strip() or _REFUSED_CHARACTERS & set(command):
        return None
    lexer = shlex.shlex(command, posix=False, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    steps: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            steps.append([])
        else:
            steps[-1].append(token)
    invocations = [_step(step) if step else None for step in steps]
    if _words(steps[-1]) is None:
        return None
    found = [words for words in invocations if words is not None]
    return found if len(found) == len(invocations) else None
