"""The ``mlplatform`` command: plan, check, new-stack, train, serve, models, rollout and doctor.

Exit codes are the contract CI relies on: 0 ok, 1 a finding (a policy violation), 2 bad input (config or
flags), each problem on one line of stderr.

Each command's module is imported only when that command runs: ``plan`` and ``check`` must work in the
infrastructure install (requirements.txt, what ``pulumi up`` installs), which has no torch, numpy or
uvicorn; ``train`` and ``serve`` name the extra to install when theirs is missing.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import typer

# typer vendors click (typer._click); its usage errors are these classes, not the click package's.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption
from typer.core import TyperCommand, TyperGroup

from mlplatform.errors import exit_with

_DISTRIBUTION = "ml-platform"


@dataclass(frozen=True)
class Verb:
    """A command, loaded on use: ``function`` in ``module``, whose imports come with ``extra``."""

    name: str
    module: str
    function: str
    extra: str
    # What `mlplatform --help` lists, without importing the module.
    summary: str
    # The name of a module attribute holding click context settings, for commands that need them.
    context: str | None = None

    def load(self) -> Any:
        """The command; exit 2 with one line naming the extra when its packages are not installed."""
        if _missing(self.extra):
            exit_with(
                [f"mlplatform {self.name} needs the {self.extra} extra: pip install -e '.[{self.extra}]'"]
            )
        module = importlib.import_module(self.module)
        target = getattr(module, self.function)
        if isinstance(target, typer.Typer):  # a group of subcommands (charts pull)
            return typer.main.get_command(target)
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        settings = getattr(module, self.context) if self.context else None
        single.command(self.name, cls=_Command, context_settings=settings)(target)
        return typer.main.get_command(single)


def _missing(extra: str) -> list[str]:
    """The distributions ``extra`` requires (pyproject.toml, as installed) that are not installed; none
    known when the project runs from a checkout that was never installed."""
    try:
        requirements = metadata.requires(_DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        name, _, marker = requirement.partition(";")
        if f'extra == "{extra}"' not in marker:
            continue
        distribution = re.split(r"[\s\[<>=!~]", name.strip(), maxsplit=1)[0]
        try:
            metadata.version(distribution)
        except metadata.PackageNotFoundError:
            missing.append(distribution)
    return missing


# One line per command; a new command is a new line.
VERBS = {
    verb.name: verb
    for verb in (
        Verb("plan", "mlplatform.plan_cmd", "plan", "infra", "Plan one stack offline."),
        Verb("check", "mlplatform.check", "check", "infra", "Judge stacks with the policy pack."),
        Verb("cost", "mlplatform.cost_cmd", "cost", "infra", "Price stacks a month before pulumi up."),
        Verb("prices", "mlplatform.prices_cmd", "app", "infra", "Rebuild the price snapshot."),
        Verb("judge", "mlplatform.judge_cmd", "judge", "infra", "Judge Kubernetes YAML with the judges."),
        Verb("new-stack", "mlplatform.newstack", "new_stack", "infra", "Write a new stack file."),
        Verb("train", "mlplatform.train_cmd", "train", "train", "Train on this machine.", "TRAIN_CONTEXT"),
        Verb("serve", "mlplatform.serve_cmd", "serve", "serve", "Serve a model version over HTTP."),
        Verb("charts", "mlplatform.charts_cmd", "app", "infra", "Verify or pull the packaged Helm charts."),
        Verb(
            "images",
            "mlplatform.images_cmd",
            "app",
            "infra",
            "Mirror third-party images; scan images' SBOMs for CVEs.",
        ),
        Verb(
            "models",
            "mlplatform.models_cmd",
            "app",
            "registry",
            "List, promote and roll back model versions.",
        ),
        Verb(
            "rollout",
            "mlplatform.rollout_cmd",
            "app",
            "serve",
            "Roll a challenger out, gated; abort, pause or resume one.",
        ),
        Verb("fabric-test", "mlplatform.fabric_cmd", "fabric_test", "train", "All-reduce bandwidth test."),
        Verb("doctor", "mlplatform.doctor", "doctor", "infra", "Check this machine's prerequisites."),
    )
}


def _flags_as_flags(params: list[Any]) -> list[Any]:
    """Typer's rich help prints ``<bool>`` after an on/off flag, as if it took a value; show none."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    """Usage errors (a missing argument, an unknown option or command) in the project's style: one line
    on stderr and exit 2, instead of the usage text and a boxed panel."""
    try:
        yield
    except NoArgsIsHelpError:
        raise
    except ClickException as error:
        context = getattr(error, "ctx", None)
        # typer words a refused choice as pydantic does ("Value error, ..."); the rest of the line says it.
        message = " ".join(error.format_message().replace("Value error, ", "").split())
        where = f"{context.command_path}: " if context is not None else ""
        hint = f" (see {context.command_path} --help)" if context is not None else ""
        exit_with([f"{where}{message}{hint}"])


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, list(args), parent, **extra)
        except NoSuchOption as error:
            # click reads "-team3" as the short option -t with a value: name the word the user typed.
            typed = next(
                (a for a in args if a.startswith(error.option_name) and a != error.option_name), None
            )
            if typed is None or typed.startswith("--"):
                raise
            raise NoSuchOption(
                typed, f"{typed!r} is not an option; a name or value cannot start with '-'", ctx=error.ctx
            ) from None


class _Verbs(TyperGroup):
    """The verbs as placeholders for the command list; the real command is loaded when one runs."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for verb in VERBS.values():
            self.add_command(TyperCommand(verb.name, help=verb.summary), verb.name)

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)

    def resolve_command(self, ctx: Any, args: Sequence[str]) -> tuple[str | None, Any, list[str]]:
        name, _, rest = super().resolve_command(ctx, list(args))
        return name, VERBS[str(name)].load(), rest


app = typer.Typer(
    name="mlplatform",
    cls=_Verbs,
    help="Plan, check and run the ML platform offline; the same program `pulumi up` deploys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        try:
            version = metadata.version(_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            exit_with([f"mlplatform: the {_DISTRIBUTION} distribution is not installed (pip install -e .)"])
        typer.echo(f"mlplatform {version}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    # A callback makes typer build a group (of the verbs above) even though no command is registered here.
    pass


def main() -> None:
    app()


if __name__ == "__main__":
    main()
