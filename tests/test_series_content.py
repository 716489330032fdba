"""The content of patches/: the series applies cleanly, in order, to the pristine upstream release
of the pin, every file it touches still compiles, and every patch explains itself.
"""

from __future__ import annotations

import py_compile
import re
import shutil
from pathlib import Path

import git
import pytest
from packaging.version import Version

from sglpatch.pin import read_pin
from sglpatch.series import read_series
from sglpatch.source import pristine_tree

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCHES = REPO_ROOT / "patches"
SERIES = PATCHES / "series"
YOCTO_STATUSES = ("Pending", "Submitted", "Backport", "Denied", "Inappropriate")
# Statuses that must say what they refer to: "Backport [v0.5.10: ...]", "Inappropriate [reason]".
STATUSES_WITH_REASON = ("Backport", "Submitted", "Denied", "Inappropriate")
# The named static checks of sglpatch that the series' Drop-When conditions may use.
CHECK_NAMES = {
    "kimi-k25-eagle3-interface",
    "eagle3-capture-wiring",
    "sm120-allreduce-fusion-gate",
    "sm12-torch-symm-mem",
}
IDENTITY = {
    "GIT_AUTHOR_NAME": "Series Test", "GIT_AUTHOR_EMAIL": "series-test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Series Test", "GIT_COMMITTER_EMAIL": "series-test@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def series_names() -> list[str]:
    names = []
    for line in SERIES.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line.split()[0])
    return names


@pytest.fixture(scope="module")
def applied(tmp_path_factory) -> tuple[Path, git.Repo, dict[str, list[str]]]:
    """A git copy of the pristine release with every patch of the series applied by `git am`."""
    pin = read_pin(REPO_ROOT)
    pristine = pristine_tree(pin.version, pin)
    work = tmp_path_factory.mktemp("series") / "tree"
    shutil.copytree(pristine, work, ignore=shutil.ignore_patterns(".sglpatch-commit"))
    repo = git.Repo.init(work)
    with repo.git.custom_environment(**IDENTITY):
        repo.git.add("--all", "--force")
        repo.git.commit("--quiet", "--no-verify", "-m", f"pristine {pin.version}")
        touched = {}
        for name in series_names():
            before = repo.head.commit.hexsha
            # No --3way, no fuzz: a patch that needs either does not apply cleanly.
            error = None
            try:
                repo.git.am("--quiet", "--keep-cr", str(PATCHES / name))
            except git.GitCommandError as exc:
                error = exc.stderr
            if error is not None:
                pytest.fail(f"{name} does not apply to pristine {pin.version}:\n{error}")
            touched[name] = repo.git.diff("--name-only", before, "HEAD").splitlines()
    return work, repo, touched


def test_series_file_is_a_commented_quilt_series():
    lines = SERIES.read_text().splitlines()
    assert lines and lines[0].startswith("#"), "the series file starts with a comment saying what it is"
    names = series_names()
    assert names == sorted(names) and len(names) == len(set(names))
    assert [n[:5] for n in names] == [f"{i:04d}-" for i in range(1, len(names) + 1)]
    on_disk = sorted(p.name for p in PATCHES.glob("*.patch"))
    assert on_disk == sorted(names), "every patch file is listed, every listed patch exists"


def test_series_applies_cleanly_in_order(applied):
    _, repo, touched = applied
    assert list(touched) == series_names()
    subjects = repo.git.log("--reverse", "--format=%s", f"HEAD~{len(touched)}..HEAD").splitlines()
    assert len(subjects) == len(touched)
    for name, files in touched.items():
        assert files, f"{name} changes nothing"
        for path in files:
            # -p1 against upstream's repository layout
            assert path.startswith("python/sglang/srt/"), (name, path)
    assert not repo.is_dirty(untracked_files=True)


def test_every_patched_file_compiles(applied, tmp_path):
    work, _, touched = applied
    files = sorted({path for paths in touched.values() for path in paths})
    assert files
    for path in files:
        if path.endswith(".py"):
            py_compile.compile(str(work / path), cfile=str(tmp_path / "out.pyc"), doraise=True)


def _trailers(repo: git.Repo, message: str, tmp_path: Path) -> dict[str, str]:
    """The trailers git itself finds in a commit message."""
    msg = tmp_path / "message.txt"
    msg.write_text(message)
    parsed = {}
    for line in repo.git.interpret_trailers("--parse", str(msg)).splitlines():
        key, _, value = line.partition(": ")
        parsed[key] = value
    return parsed


@pytest.mark.parametrize("name", series_names())
def test_patch_explains_itself(applied, tmp_path, name):
    _, repo, touched = applied
    entry = {p.name: p for p in read_series(REPO_ROOT).patches}[name]
    commit = repo.commit(f"HEAD~{len(touched) - 1 - list(touched).index(name)}")

    assert commit.summary == entry.subject and len(entry.subject) > 15
    assert not entry.subject.endswith(".")
    body = commit.message.split("\n", 1)[1].strip()
    # What broke, why, what the patch does: more than the trailers
    assert len(body.split("\n\n")) >= 3, f"{name}: the message body explains too little"

    trailers = _trailers(repo, commit.message, tmp_path)
    status = trailers.get("Upstream-Status", "")
    match = re.fullmatch(r"(\w+)(?: \[(.+)\])?", status)
    assert match and match.group(1) in YOCTO_STATUSES, f"{name}: Upstream-Status {status!r}"
    if match.group(1) in STATUSES_WITH_REASON:
        assert match.group(2), f"{name}: {match.group(1)} needs [what/why]"
    if match.group(1) == "Backport":
        assert re.match(r"v\d+\.\d+\.\d+: ", match.group(2)), f"{name}: Backport [vX.Y.Z: ...]"
    assert entry.upstream_status == status

    conditions = [c.strip() for c in trailers.get("Drop-When", "").split(",") if c.strip()]
    assert conditions, f"{name}: no Drop-When"
    for condition in conditions:
        if condition.startswith("check:"):
            assert condition[len("check:"):] in CHECK_NAMES, condition
        else:
            assert condition.startswith("upstream>="), condition
            assert Version(condition[len("upstream>="):]) > Version(read_pin(REPO_ROOT).version)
    assert [str(c) for c in entry.drop_when] == conditions
    # the trailers close the message
    assert list(trailers) == ["Upstream-Status", "Drop-When"]
    assert commit.message.rstrip().endswith("Drop-When: " + trailers["Drop-When"])


def test_patches_are_reproducible_exports():
    for name in series_names():
        text = (PATCHES / name).read_text()
        assert text.startswith("From 0000000000000000000000000000000000000000 "), name
        assert "\nFrom: Kimi Fork Maintainers <maintainers@kimi-fork.invalid>\n" in text, name
        assert "\nDate: Wed, 2 Dec 2026 00:00:00 +0000\n" in text, name
        assert "\nSubject: [PATCH] " in text, name
        assert re.search(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40}", text, re.M), f"{name}: --full-index"
        assert not text.rstrip().endswith("-- \n2."), f"{name}: --no-signature"
