"""The pages run as pasted (issue 41): every `mlplatform` command parses with the real CLI, a bare
`mlplatform` comes after the page says how to activate the venv, every `make` target exists, every link
and anchor resolves, and every reference to a section (`README.md "X"`, `docs/x.md "Y"`) in the pages,
the stack templates and the program's messages names a real heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlplatform.plan import REPO_ROOT
from tests.mlplatform.pages import (
    ACTIVATE,
    COMMAND_PAGES,
    PAGES,
    Command,
    cli_problem,
    fenced_shell_commands,
    heading_slugs,
    headings,
    inline_commands,
)
from workloads.training.config import build_parser

MLPLATFORM = ("mlplatform", ".venv/bin/mlplatform")


def _runnable(command: Command) -> bool:
    """A command a reader pastes: every fenced one; inline, one with arguments and no synopsis
    placeholder (`mlplatform rollout NAME`), as `mlplatform plan` alone names the verb."""
    words = command.program
    return command.fenced or (len(words) > 2 and not any(re.fullmatch(r"[A-Z][A-Z_]*", w) for w in words))


def _commands(programs: tuple[str, ...]) -> list[Command]:
    found = []
    for page in COMMAND_PAGES:
        for command in [*fenced_shell_commands(page), *inline_commands(page, programs)]:
            if command.program and command.program[0] in programs and _runnable(command):
                found.append(command)
    return found


COMMANDS = _commands(MLPLATFORM)


def test_the_pages_show_mlplatform_commands() -> None:
    """Not vacuous: the walk-through, the first success and the area pages all have commands."""
    pages = {command.page.name for command in COMMANDS}
    assert {"README.md", "stacks.md", "registry.md", "policies.md", "inference.md"} <= pages, pages
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_every_mlplatform_command_parses_with_the_real_cli(command: Command) -> None:
    problem = cli_problem(list(command.program[1:]))
    assert problem is None, f"{command.where}: {' '.join(command.words)}: {problem}"


def test_the_parser_check_catches_a_wrong_flag_and_a_wrong_verb() -> None:
    """The check above, shown to fail: an unknown flag, a missing argument, a refused choice, an unknown
    subcommand and a trainer flag that does not exist."""
    assert cli_problem(["plan", "team2-prod", "--manifest", "out/m"]) is not None
    assert cli_problem(["new-stack", "x", "--cloud", "gcp", "--tier", "smb", "--env", "dev"]) is not None
    assert cli_problem(["models", "promot", "digits-mlp", "2"]) is not None
    assert cli_problem(["rollout"]) is not None
    assert cli_problem(["train", "--local", "--epochz", "2"]) is not None
    assert cli_problem(["plna"]) is not None
    assert cli_problem(["train", "--local", "--nproc", "2", "--epochs", "2"]) is None


def _synopses() -> list[tuple[str, str]]:
    """Inline synopses, which no shell runs as written: `mlplatform plan STACK [--json F]`,
    `mlplatform models list|promote|rollback NAME ...`; (page, synopsis)."""
    found = []
    for page in COMMAND_PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for span in re.findall(r"`((?:\.venv/bin/)?mlplatform [a-z][^`]*)`", text):
            if any(marker in span for marker in ("[", "|", "...")):
                found.append((page.name, " ".join(span.replace("\\|", "|").split())))
    return found


def _flags(words: list[str]) -> set[str] | None:
    """Every flag the synopsis's command (or its alternatives' subcommands) takes; None: no such verb."""
    from mlplatform.cli import VERBS

    verb = VERBS.get(words[1])
    if verb is None:
        return None
    command = verb.load()
    commands = [command]
    if hasattr(command, "commands"):
        # The group's own resolution, as a shell would get it (`rollout NAME` runs `start`).
        context = command.context_class(command, info_name=words[1])
        commands = [command.resolve_command(context, [sub, *words[3:]])[1] for sub in words[2].split("|")]
    flags = {
        opt for each in commands for param in each.params for opt in [*param.opts, *param.secondary_opts]
    }
    if words[1] == "train":
        flags |= set(build_parser()._option_string_actions)
    return flags


def test_every_synopsis_names_a_verb_and_flags_that_exist() -> None:
    synopses = _synopses()
    assert len(synopses) >= 8, synopses
    for page, synopsis in synopses:
        words = synopsis.split()
        flags = _flags(words)
        assert flags is not None, f"{page}: {synopsis}: no such verb"
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", synopsis))
        assert named <= flags, f"{page}: {synopsis}: no such flag {sorted(named - flags)}"
    # Shown to fail: a flag of no verb, a subcommand's flag under another, an unknown verb.
    assert "--manifest" not in (_flags(["mlplatform", "plan", "STACK"]) or set())
    assert "--force" not in (_flags(["mlplatform", "models", "list|rollback", "NAME"]) or set())
    assert "--force" in (_flags(["mlplatform", "models", "list|promote", "NAME"]) or set())
    assert _flags(["mlplatform", "plna", "STACK"]) is None


def test_a_bare_mlplatform_comes_after_the_page_says_how_to_activate_the_venv() -> None:
    """`mlplatform` is on PATH only in the activated venv (`make setup` prints how): a page that runs it
    bare states the activation line before; otherwise it writes `.venv/bin/mlplatform`."""
    unactivated = []
    for command in COMMANDS:
        if command.program[0] == "mlplatform":
            text = command.page.read_text()
            if not 0 <= text.find(ACTIVATE) < command.offset:
                unactivated.append(command.where)
    assert not unactivated, f"bare mlplatform before `{ACTIVATE}` on the page: {unactivated}"


def test_make_setup_ends_by_printing_how_to_activate_the_venv() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    match = re.search(r"^setup:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, "setup has a recipe"
    assert ACTIVATE in match.group(1).splitlines()[-1]


def test_every_make_target_a_fenced_command_names_exists() -> None:
    targets = set(re.findall(r"(?m)^([a-z][a-z-]*):", (REPO_ROOT / "Makefile").read_text()))
    makes = _commands(("make",))
    assert any(command.fenced for command in makes)
    for command in makes:
        named = [word for word in command.program[1:] if not word.startswith("-") and "=" not in word]
        assert set(named) <= targets, f"{command.where}: {' '.join(command.words)}"


# Links: [text](target) and [text](target#anchor), relative ones; the page's own anchors as (#anchor).
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _link_problems(page: Path) -> list[str]:
    problems = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in heading_slugs(linked):
            problems.append(f"{target}: no heading with that anchor")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    problems = _link_problems(page)
    assert not problems, f"{page.relative_to(REPO_ROOT)}: {problems}"


def test_the_link_check_catches_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## The `plan` verb\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#the-plan-verb) [ok](b.md#two-words-1) [gone](c.md) [bad](b.md#the-plan) [self](#nope)"
    )
    assert _link_problems(page) == [
        "c.md: no such file",
        "b.md#the-plan: no heading with that anchor",
        "#nope: no heading with that anchor",
    ]


# A page of ours, or a section of one, named in a comment, a message or a page: `docs/azure.md`,
# `README.md "Two commands"`, `docs/stacks.md, "State and secrets in-region"`. Another project's file says
# whose it is first (`azurefile-csi-driver docs/driver-parameters.md`): a word with `-` or `/` before it.
_PAGE_REFERENCE = re.compile(r"(?<![\w/.-])(README\.md|docs/[\w-]+\.md)(?:,? [\"“]([^\"”]+)[\"”])?")
_OWNER = re.compile(r"[\w.-]*[-/][\w./-]*\s+$")
# A README named without saying whose: `(README)`, `(README "X")`, `(README: X)`, `(README, "X")`,
# `the README`. Another project's README says whose it is: `kubelogin README`, `(its README)`.
_BARE_README = re.compile(r"(?:\(|^|[#*] |\bthe )README\b(?!\.md)", re.MULTILINE)


def sections(page: Path) -> set[str]:
    """What a reference may name on a page: its headings, and the bold lead of a paragraph
    (`**Rotating the admin's password.**`)."""
    leads = re.findall(r"(?m)^\*\*([^*]+?)\.?\*\*", page.read_text())
    return {*headings(page), *leads}


def _sources() -> list[Path]:
    """The stack templates, the program's and the pack's sources, and the pages."""
    sources = [*sorted((REPO_ROOT / "stacks").glob("*.yaml")), *PAGES]
    for package in ("components", "judges", "mlplatform", "policies/mlplatform_policies", "workloads"):
        sources += sorted((REPO_ROOT / package).rglob("*.py"))
    return sources


def _reference_problems(sources: list[Path]) -> list[str]:
    problems = []
    for source in sources:
        # A reference wraps over comment lines (`# ...`) and Python's escaped quotes stay quotes.
        text = re.sub(r"\n[ \t]*#+[ \t]*", "\n", source.read_text()).replace("\\'", "'")
        where = source.relative_to(REPO_ROOT) if source.is_relative_to(REPO_ROOT) else source
        for match in _PAGE_REFERENCE.finditer(text):
            if _OWNER.search(text, max(0, match.start() - 60), match.start()):
                continue  # another project's page
            page, section = REPO_ROOT / match.group(1), match.group(2)
            if not page.exists():
                problems.append(f"{where}: {match.group(1)}: no such page")
            elif section is not None and " ".join(section.split()) not in sections(page):
                problems.append(f'{where}: {match.group(1)} "{" ".join(section.split())}": no such section')
        for match in _BARE_README.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{where}:{line}: a bare README; name README.md and its section")
    return problems


def test_every_section_a_template_message_or_page_names_exists() -> None:
    """A comment in a stack file or a config error that points to a section that is gone (`README
    "Monitoring"`, "README: two-phase bring-up") sends a user looking for nothing."""
    sources = _sources()
    problems = _reference_problems(sources)
    assert not problems, "\n".join(problems)


def test_the_reference_check_catches_a_gone_section_and_a_bare_readme(tmp_path: Path) -> None:
    planted = tmp_path / "Pulumi.x.yaml"
    planted.write_text(
        '# (README "Monitoring") and (README: two-phase bring-up)\n'
        '# docs/stacks.md "State and secrets in-region" and README.md, "Two commands"\n'
        '# docs/stacks.md, "Gone"; the kubelogin README, "Setup"; docs/gone.md\n'
        '# azurefile-csi-driver docs/driver-parameters.md, "mountPermissions"; (docs/stacks.md, "State\n'
        '# and secrets in-region"); kubernetes-sigs/aws-ebs-csi-driver\n'
        "# docs/parameters.md\n"
    )
    assert _reference_problems([planted]) == [
        f'{planted}: docs/stacks.md "Gone": no such section',
        f"{planted}: docs/gone.md: no such page",
        f"{planted}:1: a bare README; name README.md and its section",
        f"{planted}:1: a bare README; name README.md and its section",
    ]


def _deploy_steps(page: Path) -> list[str]:
    """The titles of a page's numbered deploy steps (`1. **Set up**: ...`)."""
    return re.findall(r"(?m)^\d+\. \*\*([^*]+)\*\*", page.read_text())


def test_readme_and_docs_stacks_walk_the_deploy_path_in_the_same_order() -> None:
    """README's steps and docs/stacks.md's steps in detail: the same milestones in the same order (the
    state backend was third in one and fifth in the other)."""
    milestones = [
        "set up",
        "name the stack",
        "placeholders",
        "check offline",
        "state",
        "phase one",
        "phase two",
    ]
    for page in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "stacks.md"):
        steps = [title.lower() for title in _deploy_steps(page)]
        found = [next((i for i, s in enumerate(steps) if m in s), -1) for m in milestones]
        assert -1 not in found and found == sorted(found), (page.name, steps)


def test_the_architecture_page_lists_every_verb() -> None:
    from mlplatform.cli import VERBS

    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    listed = re.search(r"CLI: ([^\n]+(?:\n {20,}[^\n]+)*)", text)
    assert listed, "the CLI line of the layout"
    assert sorted(verb for verb in re.split(r"[·\s]+", listed.group(1)) if verb) == sorted(VERBS)


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run collected the whole suite: the configured testpaths, nothing deselected."""
    option = config.option
    roots = {(Path(config.invocation_params.dir) / arg).resolve() for arg in config.args}
    narrowed = option.keyword or option.markexpr or option.deselect or getattr(option, "lf", False)
    return roots == {REPO_ROOT / path for path in config.getini("testpaths")} and not narrowed


def test_the_stated_size_of_the_suite_is_near_the_real_one(request: pytest.FixtureRequest) -> None:
    """docs/development.md says how many tests there are; a stated figure goes stale as tests are added,
    so a full run (`make test`, every worker of a parallel one) compares it with what it collected: within
    a fifth, which a few new tests never break and a doubled suite (750 stated, 1,569 real) does."""
    if not _whole_suite(request.config):
        pytest.skip("this run collected part of the suite; a full run (make test) checks the figure")
    text = (REPO_ROOT / "docs" / "development.md").read_text()
    stated = re.search(r"The suite has about ([\d,]+) tests", text)
    assert stated, "docs/development.md states the suite's size"
    expected, collected = int(stated.group(1).replace(",", "")), len(request.session.items)
    assert abs(collected - expected) <= expected / 5, f"stated about {expected}, collected {collected}"


OPERATIONS = REPO_ROOT / "docs" / "operations.md"
# A row of the runbooks' table: `| [Runbook](#anchor) | `tests/x.py::test_y`, ... |`.
_RUNBOOK_ROW = re.compile(r"(?m)^\| \[[^\]]+\]\(#([\w-]+)\) \|(.+)\|$")
_TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _runbook_problems(page: Path) -> list[str]:
    """Every runbook section (a heading below the page's title) has a row naming at least one test, and
    every test a row names is defined in its file."""
    rows = {anchor: _TEST_ID.findall(tests) for anchor, tests in _RUNBOOK_ROW.findall(page.read_text())}
    title = re.sub(r"[^\w\- ]", "", headings(page)[0].lower()).replace(" ", "-")
    runbooks = heading_slugs(page) - {title}
    problems = [f"#{s}: a runbook without a test" for s in sorted(runbooks) if not rows.get(s)]
    problems += [f"#{s}: no runbook section" for s in sorted(rows) if s not in runbooks]
    for anchor, tests in rows.items():
        for path, name in tests:
            source = REPO_ROOT / path
            if not source.is_file() or not re.search(rf"(?m)^def {name}\(", source.read_text()):
                problems.append(f"#{anchor}: {path}::{name}: no such test")
    return problems


def test_every_runbook_names_the_tests_that_run_it() -> None:
    """Issue 38, "Done when": the upgrade and rotation runbooks of docs/operations.md are each exercised
    by a test; the page's table names them, and a new runbook must add its row."""
    assert _runbook_problems(OPERATIONS) == []


def test_the_runbook_check_catches_a_runbook_without_a_test_and_a_gone_test(tmp_path: Path) -> None:
    page = tmp_path / "operations.md"
    real = "`tests/mlplatform/test_docs.py::test_every_runbook_names_the_tests_that_run_it`"
    page.write_text(
        "# Ops\n\n| Runbook | Tests |\n|---|---|\n"
        f"| [Tested](#tested) | {real} |\n"
        "| [Gone](#gone) | `tests/mlplatform/test_docs.py::test_nothing_here` |\n"
        f"| [Nowhere](#nowhere) | {real} |\n"
        "\n## Tested\n\n## Gone\n\n## Untested\n"
    )
    assert _runbook_problems(page) == [
        "#untested: a runbook without a test",
        "#nowhere: no runbook section",
        "#gone: tests/mlplatform/test_docs.py::test_nothing_here: no such test",
    ]
