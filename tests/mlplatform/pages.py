"""The pages a newcomer reads, read as a newcomer does: their shell commands, links and headings.

Shared by the tests that keep the pages true (test_readme.py, test_docs.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer._click.exceptions import ClickException

from mlplatform.cli import app
from mlplatform.plan import REPO_ROOT
from workloads.training.config import ConfigError, build_parser

# The front page, one page per area, the examples and the benchmarks.
PAGES = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "CHANGELOG.md",
    REPO_ROOT / "benchmarks" / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    *sorted((REPO_ROOT / "examples").rglob("*.md")),
]
# The pages whose commands a newcomer pastes.
COMMAND_PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    REPO_ROOT / "examples" / "README.md",
]
# The line that puts `mlplatform` on PATH; a page that runs it bare states this line first.
ACTIVATE = "source .venv/bin/activate"

_FENCE = re.compile(r"^( *)```([\w-]*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
_SHELL = {"bash", "sh", "shell", "console"}
_OPERATORS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Command:
    """One simple command a page shows: its words, where it starts on the page, and whether it sits in a
    fenced shell block (else an inline code span)."""

    page: Path
    offset: int
    words: tuple[str, ...]
    fenced: bool

    @property
    def where(self) -> str:
        line = self.page.read_text().count("\n", 0, self.offset) + 1
        return f"{self.page.relative_to(REPO_ROOT)}:{line}"

    @property
    def program(self) -> tuple[str, ...]:
        """The words without the leading environment assignments (``PYTHONPATH=x mlplatform ...``)."""
        words = list(self.words)
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        return tuple(words)


def _simple_commands(text: str) -> list[list[str]]:
    """``text`` as a shell reads it: continuation lines joined, comments dropped, split at ``&&``,
    ``||``, ``;``, ``|`` and ``&``."""
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _OPERATORS or token == "\n":
            commands.append([])
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


def fenced_shell_commands(page: Path) -> list[Command]:
    """Every simple command in the page's ```bash (sh, shell, console) blocks, line by line."""
    text = page.read_text()
    found = []
    for block in _FENCE.finditer(text):
        if block.group(2) not in _SHELL:
            continue
        start = block.start(3)
        body = block.group(3)
        # One logical line at a time, so each command keeps its own place on the page.
        for match in re.finditer(r"(?:[^\n]*\\\n)*[^\n]*\n?", body):
            if match.group().strip():
                for words in _simple_commands(match.group()):
                    found.append(Command(page, start + match.start(), tuple(words), fenced=True))
    return found


def _without_fences(text: str) -> str:
    """The page with its fenced blocks blanked out (offsets kept), so inline spans are found alone."""
    return _FENCE.sub(lambda block: re.sub(r"[^\n]", " ", block.group()), text)


def inline_commands(page: Path, programs: tuple[str, ...]) -> list[Command]:
    """Inline code spans that are a whole command for one of ``programs`` (possibly over two lines of
    the paragraph); a synopsis (``[--json F]``, ``list|promote``, ``...``) is not one."""
    found = []
    for span in re.finditer(r"`([^`]+)`", _without_fences(page.read_text())):
        body = " ".join(span.group(1).split())
        if any(marker in body for marker in ("[", "|", "...", "\\")):
            continue
        try:
            words = shlex.split(body)
        except ValueError:
            continue
        command = Command(page, span.start(), tuple(words), fenced=False)
        if command.program and command.program[0] in programs:
            found.append(command)
    return found


def heading_slugs(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: the heading's text (markup removed) lowercased,
    every character that is not a letter, digit, space, ``-`` or ``_`` dropped, spaces as ``-``; a
    repeated slug gets ``-1``, ``-2``... (github-slugger, which github.com's renderer follows)."""
    slugs: set[str] = set()
    for title in headings(page):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in slugs:
            n += 1
            unique = f"{slug}-{n}"
        slugs.add(unique)
    return slugs


def headings(page: Path) -> list[str]:
    """The page's ATX headings outside fenced blocks, as text (code and link markup removed)."""
    titles = []
    for line in _without_fences(page.read_text()).splitlines():
        match = re.match(r"#{1,6} +(.+?) *#* *$", line)
        if match:
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
            titles.append(title.replace("`", "").replace("*", ""))
    return titles


def cli_problem(words: list[str]) -> str | None:
    """Why the real CLI refuses ``words`` (usage only: nothing runs), or None. Each level is parsed by the
    real click command object: the root, the verb (loaded as `mlplatform` loads it), a group's
    subcommand; train's pass-through flags by the trainer's own parser."""
    root = typer.main.get_command(app)
    try:
        context: Any = root.make_context("mlplatform", list(words))
        command: Any = root
        while hasattr(command, "resolve_command"):
            rest = [*context._protected_args, *context.args]
            if not rest:
                return None  # `mlplatform --help` and the like
            name, command, rest = command.resolve_command(context, rest)
            context = command.make_context(name, rest, parent=context)
    except ClickException as error:
        return error.format_message()
    if context.command.name == "train":
        try:
            build_parser().parse_args(context.args)
        except ConfigError as error:
            return str(error)
    return None
