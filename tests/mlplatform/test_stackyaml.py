"""Stack files are read as the Pulumi CLI reads them (go-yaml v3, YAML 1.2; mlplatform/stackyaml.py), so a
plan sees the values `pulumi up` will: a bare yes/no/on/off is a string (go-yaml v3 README,
"Compatibility": YAML 1.1 bools only when decoding into a typed bool), so is a base-60 number (gone in
YAML 1.2, never supported by go-yaml); a duplicate key is refused naming it and both lines (YAML 1.2.2
section 3.2.1.1: keys MUST be unique); a file that is not UTF-8 is named with its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.errors import InputError
from mlplatform.stackyaml import load, loads


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("yes", "yes"),
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("Y", "Y"),
        ("NO", "NO"),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("12:30", "12:30"),
        ("1:20:30", "1:20:30"),
        ("0o17", 15),
        ("0777", 511),
        ("0x1F", 31),
        ("42", 42),
        ("-1.5", -1.5),
        ("1e3", 1000.0),
        (".inf", float("inf")),
        ("~", None),
        ('"yes"', "yes"),
    ],
)
def test_scalars_resolve_as_yaml_1_2(text: str, value: object) -> None:
    assert loads(f"key: {text}\n", "Pulumi.x.yaml") == {"key": value}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "config:\n  a: 1\n  a: 2\n",
            "Pulumi.x.yaml: line 3: key 'a' is given twice (first on line 2); keep one",
        ),
        (
            "config:\n  p:\n    nodePools:\n      - name: gpu\n        minSize: 0\n        minSize: 2\n",
            "Pulumi.x.yaml: line 6: key 'minSize' is given twice (first on line 5); keep one",
        ),
        ("a: 1\nb: 2\na: 3\n", "Pulumi.x.yaml: line 3: key 'a' is given twice (first on line 1); keep one"),
        ("{a: 1, a: 1}\n", "Pulumi.x.yaml: line 1: key 'a' is given twice (first on line 1); keep one"),
    ],
)
def test_a_duplicate_key_is_refused_naming_it_and_its_lines(text: str, line: str) -> None:
    with pytest.raises(InputError) as raised:
        loads(text, "Pulumi.x.yaml")
    assert raised.value.problems == [line]


def test_a_merge_key_is_not_a_duplicate() -> None:
    text = "base: &b {a: 1}\nmore:\n  <<: *b\n  c: 2\n"
    assert loads(text, "Pulumi.x.yaml")["more"] == {"a": 1, "c": 2}


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            b"config:\n  owner: caf\xe9\n",
            "Pulumi.x.yaml: line 2: byte 0xe9 is not UTF-8; save the file as UTF-8",
        ),
        (b"\xff\xfec\x00o\x00", "Pulumi.x.yaml: line 1: byte 0xff is not UTF-8; save the file as UTF-8"),
        (b"a: 1\nb: 2\n\x80\n", "Pulumi.x.yaml: line 3: byte 0x80 is not UTF-8; save the file as UTF-8"),
    ],
)
def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path: Path, data: bytes, line: str) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(data)
    with pytest.raises(InputError) as raised:
        load(path)
    assert raised.value.problems == [line]


SHIPPED = Path(__file__).parents[2] / "stacks" / "Pulumi.aws-smb-dev.yaml"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (
            SHIPPED.read_text().replace("config:\n", "config:\n  aws:region: me-central-1\n", 1).encode(),
            r"line \d+: key 'aws:region' is given twice \(first on line \d+\); keep one",
        ),
        (
            (SHIPPED.read_text() + "# caf\xe9\n").encode("latin-1"),
            r"line \d+: byte 0xe9 is not UTF-8; save .*",
        ),
        (b"config: [unclosed\n", r"line \d+: not valid YAML \(.*\)"),
    ],
)
def test_plan_and_check_refuse_a_bad_stack_file_in_one_line(tmp_path: Path, data: bytes, says: str) -> None:
    """Through the CLI: exit 2 and one line on stderr naming the file and line, no traceback."""
    path = tmp_path / "Pulumi.aws-smb-dev.yaml"
    path.write_bytes(data)
    for verb in (["plan", "-q"], ["check"]):
        result = CliRunner().invoke(app, [*verb, "--stack-file", str(path)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if not line.startswith("[1/1]")]
        assert len(lines) == 1 and re.fullmatch(f"error: Pulumi.aws-smb-dev.yaml: (?:{says})", lines[0]), (
            lines
        )


def test_a_bare_no_is_the_string_pulumi_passes(tmp_path: Path) -> None:
    """`environment: no` is the environment "no" to Pulumi; YAML 1.1 would make it false, and the config
    would then fail as not a string."""
    path = tmp_path / "Pulumi.aws-smb-dev.yaml"
    path.write_text(SHIPPED.read_text().replace("environment: dev", "environment: no"))
    assert load(path)["config"]["ml-platform:platform"]["environment"] == "no"
    result = CliRunner().invoke(app, ["plan", "-q", "--stack-file", str(path)])
    assert result.exit_code == 0, result.output
