"""The build context pulumi-docker-build hashes holds exactly what the image tag names (AWS review A2,
/work/wt-aws2-REPORT.md; issue 23).

pulumi-docker-build v0.0.22 diffs an Image on a hash of its build context (``provider/internal/image.go``
Diff → ``hashBuildContext``: the Dockerfile's bytes, then every file the ignore rules admit, its content,
path and mode; ``context.go`` ``hashFile``). A context hash that changes while the tag stays is a rebuild
pushed to an existing tag, which ECR's IMMUTABLE repositories refuse (aws/containers-roadmap#2179); ACR
takes the push and the tag moves under running pods. The ignore rules are each Dockerfile's own
``<Dockerfile>.dockerignore`` (context.go ``getIgnorePatterns``; Docker docs "Build context", Filename
and location), matched as moby/patternmatcher v0.6.1 matches them.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
from pathlib import Path

import pytest

from components.build_context import IgnoreRules, context_files, ignore_file, read_patterns
from components.images import (
    DOCKERFILES,
    INFERENCE_DOCKERFILE,
    REGISTRY_DOCKERFILE,
    REPO,
    TRAINING_DOCKERFILE,
    content_tag,
    copy_sources,
    ignore_rules,
    stale_build_files,
)

# moby/patternmatcher v0.6.1 patternmatcher_test.go TestMatches (MatchesOrParentMatches), POSIX rows.
MOBY_MATCHES = [
    ("**", "file", True),
    ("**", "dir/file/", True),
    ("**/", "dir/file", True),
    ("dir/**", "dir/dir2/file", True),
    ("**/dir", "dir/file", True),
    ("**/dir2/*", "dir/dir2/file", True),
    ("**file", "dir/dir/file", True),
    ("**/file*.txt", "dir/dir/file.txt", True),
    ("**/**/*.txt2", "dir/dir/file.txt", False),
    ("**/*.txt", "file.txt", True),
    ("a**/*.txt", "a/dir/dir/file.txt", True),
    ("a/*.txt", "a/dir/file.txt", False),
    ("a/*.txt", "a/file.txt", True),
    ("a[b-d]e", "aae", False),
    ("a[^b-d]e", "aze", True),
    (".*", "foo", False),
    ("abc.def", "abcZdef", False),
    ("abc?def", "abcZdef", True),
    ("**/foo/bar", "dir/dir2/foo/bar", True),
    ("abc/**", "abc", False),
    ("abc/**", "abc/def/ghi", True),
    ("**/.foo", "bar.foo", False),
    ("a(b)c/def", "a(b)c/def", True),
    ("a.|)$(}+{bc", "a.|)$(}+{bc", True),
    ("dist/*.whl", "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", True),
    ("a\\*b", "a*b", True),
]
MOBY_MULTI = [
    (["**", "!util/docker/web"], "util/docker/web/foo", False),
    (["**", "!util/docker/web", "util/docker/web/foo"], "util/docker/web/foo", True),
    (["**", "!dist/*.whl"], "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", False),
]


@pytest.mark.parametrize(("pattern", "path", "excluded"), MOBY_MATCHES)
def test_patterns_match_as_moby_patternmatcher_does(pattern: str, path: str, excluded: bool) -> None:
    assert IgnoreRules([pattern]).excludes(path) is excluded


@pytest.mark.parametrize(("patterns", "path", "excluded"), MOBY_MULTI)
def test_the_last_matching_pattern_decides(patterns: list[str], path: str, excluded: bool) -> None:
    assert IgnoreRules(patterns).excludes(path) is excluded


def test_ignore_file_lines_are_read_as_ignorefile_readall_reads_them() -> None:
    """moby/patternmatcher v0.6.1 ignorefile.ReadAll: comments, trimming, Clean, leading '/' dropped."""
    text = "\ufeff# comment\n  /a/b/  \n\n! c/../d/\n*\n"
    assert read_patterns(text) == ["a/b", "!d", "*"]


def _provider_hash(root: Path, dockerfile: Path) -> str:
    """hashBuildContext: the Dockerfile's bytes, then each admitted file's content, path and mode."""
    digest = hashlib.sha256(dockerfile.read_bytes())
    for file in context_files(root, dockerfile):
        digest.update(file.read_bytes())
        digest.update(file.relative_to(root).as_posix().encode())
        digest.update(stat.filemode(file.lstat().st_mode).encode())
    return digest.hexdigest()


def test_each_dockerfile_has_its_own_ignore_file_generated_from_its_copy_lines() -> None:
    assert stale_build_files() == []
    for dockerfile in DOCKERFILES:
        assert ignore_file(dockerfile).read_text() == ignore_rules(dockerfile)
        admitted = {f.relative_to(REPO).as_posix() for f in context_files(REPO, dockerfile)}
        for source in copy_sources(dockerfile):
            assert any(f == source or f.startswith(source) for f in admitted), source
        assert all(any(f == s or f.startswith(s) for s in copy_sources(dockerfile)) for f in admitted)
        assert not any("__pycache__" in f or f.endswith(".pyc") for f in admitted)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository as a deployer checks it out (no virtualenvs, no caches)."""
    root = tmp_path / "repo"
    shutil.copytree(
        REPO,
        root,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", ".tools", "__pycache__", "*_cache", "out"),
    )
    return root


def _state(root: Path, dockerfile: Path, target: str | None) -> tuple[str, str]:
    local = root / dockerfile.relative_to(REPO)
    return _provider_hash(root, local), content_tag(local, target, root)


UNREAD = {
    TRAINING_DOCKERFILE: [
        "stacks/Pulumi.aws-enterprise-prod.yaml",
        "tests/conftest.py",
        "Pulumi.yaml",
        "Makefile",
        # Review aws.md N2: the README and the IaC code were in the training image.
        "README.md",
        "components/kubernetes/addons.py",
        "workloads/training/k8s.py",
    ],
    INFERENCE_DOCKERFILE: [
        "stacks/Pulumi.azure-enterprise-prod.yaml",
        "tests/conftest.py",
        "components/images.py",
        "mlplatform/cli.py",
        "workloads/training/Dockerfile",
    ],
    REGISTRY_DOCKERFILE: [
        "stacks/Pulumi.aws-smb-dev.yaml",
        "workloads/registry/lineage.py",
        "components/kubernetes/registry.py",
        "pyproject.toml",
    ],
}
READ = {
    TRAINING_DOCKERFILE: [
        "components/handle.py",
        "workloads/training/__main__.py",
        "workloads/training/requirements.txt",
    ],
    INFERENCE_DOCKERFILE: [
        "workloads/inference/server.py",
        "workloads/artifacts.py",
        "workloads/inference/requirements.txt",
    ],
    REGISTRY_DOCKERFILE: [
        "workloads/registry/server/launch.py",
        "workloads/registry/server/requirements.txt",
    ],
}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=["training", "inference", "registry"])
def test_a_file_the_build_does_not_read_changes_neither_context_hash_nor_tag(
    tree: Path, dockerfile: Path
) -> None:
    """Review A2: a stack config, test, doc (or, for inference, components/) edit left the tag but changed
    the context hash, so the next `pulumi up` rebuilt and pushed to an existing immutable tag."""
    target = "efa" if dockerfile == TRAINING_DOCKERFILE else None
    before = _state(tree, dockerfile, target)
    for name in UNREAD[dockerfile]:
        path = tree / name
        path.write_text(path.read_text() + "\n# edited\n")
    (tree / "docs").mkdir(exist_ok=True)
    (tree / "docs" / "new.md").write_text("a new page\n")
    assert _state(tree, dockerfile, target) == before


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=["training", "inference", "registry"])
def test_a_file_the_build_copies_changes_both_the_context_hash_and_the_tag(
    tree: Path, dockerfile: Path
) -> None:
    target = "efa" if dockerfile == TRAINING_DOCKERFILE else None
    for name in READ[dockerfile]:
        before = _state(tree, dockerfile, target)
        path = tree / name
        path.write_text(path.read_text() + "\n# edited\n")
        after = _state(tree, dockerfile, target)
        assert after[0] != before[0] and after[1] != before[1], name
    # The provider hashes the mode too (a checkout under another umask): so must the tag.
    path = tree / READ[dockerfile][0]
    before = _state(tree, dockerfile, target)
    path.chmod(path.stat().st_mode ^ stat.S_IWGRP)
    after = _state(tree, dockerfile, target)
    assert after[0] != before[0] and after[1] != before[1]
