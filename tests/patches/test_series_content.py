"""The content of every line's patches/: the series applies cleanly, in order, to the pristine
upstream release of the line's pin, every file it touches still compiles, and every patch explains
itself. One set of tests, run for each maintained line (production and lines/*).
"""

from __future__ import annotations

import py_compile
import re
import shutil
from pathlib import Path

import git
import pytest
from packaging.version import Version
from sglang_runtime import line_names

from sglpatch.queue.line import find_line
from sglpatch.queue.series import PATCH_DIR, SERIES_FILE, read_series
from sglpatch.upstream.pin import read_pin
from sglpatch.upstream.source import pristine_tree

REPO_ROOT = Path(__file__).resolve().parents[2]
LINES = line_names()
YOCTO_STATUSES = ("Pending", "Submitted", "Backport", "Denied", "Inappropriate")
# Statuses that must say what they refer to: "Backport [v0.5.10: ...]", "Inappropriate [reason]".
STATUSES_WITH_REASON = ("Backport", "Submitted", "Denied", "Inappropriate")
# The named static checks of sglpatch that the series' Drop-When conditions may use.
CHECK_NAMES = {
    "kimi-k25-eagle3-interface",
    "eagle3-capture-wiring",
    "sm120-allreduce-fusion-gate",
    "sm12-torch-symm-mem",
    "eagle3-aux-layer-resolution",
}
IDENTITY = {
    "GIT_AUTHOR_NAME": "Series Test",
    "GIT_AUTHOR_EMAIL": "series-test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Series Test",
    "GIT_COMMITTER_EMAIL": "series-test@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def line_root(line: str) -> Path:
    return find_line(REPO_ROOT, line).root


def patches_dir(line: str) -> Path:
    return line_root(line) / PATCH_DIR


def series_names(line: str) -> list[str]:
    names = []
    for text in (patches_dir(line) / SERIES_FILE).read_text().splitlines():
        text = text.split("#", 1)[0].strip()
        if text:
            names.append(text.split()[0])
    return names


@pytest.fixture(scope="module")
def applied_trees(tmp_path_factory):
    """``apply(line)``: a git copy of the line's pristine release with every patch of its series
    applied by `git am` (made once per line)."""
    made: dict[str, tuple[Path, git.Repo, dict[str, list[str]]]] = {}

    def apply(line: str):
        if line not in made:
            made[line] = _apply_series(line, tmp_path_factory.mktemp(f"series-{line}") / "tree")
        return made[line]

    return apply


@pytest.fixture(params=LINES)
def applied(request, applied_trees) -> tuple[Path, git.Repo, dict[str, list[str]]]:
    return applied_trees(request.param)


def _apply_series(line: str, work: Path) -> tuple[Path, git.Repo, dict[str, list[str]]]:
    pin = read_pin(line_root(line))
    pristine = pristine_tree(pin.version, pin)
    shutil.copytree(pristine, work, ignore=shutil.ignore_patterns(".sglpatch-commit"))
    repo = git.Repo.init(work)
    with repo.git.custom_environment(**IDENTITY):
        repo.git.add("--all", "--force")
        repo.git.commit("--quiet", "--no-verify", "-m", f"pristine {pin.version}")
        touched = {}
        for name in series_names(line):
            before = repo.head.commit.hexsha
            # No --3way, no fuzz: a patch that needs either does not apply cleanly.
            error = None
            try:
                repo.git.am("--quiet", "--keep-cr", str(patches_dir(line) / name))
            except git.GitCommandError as exc:
                error = exc.stderr
            if error is not None:
                pytest.fail(f"{line} line: {name} does not apply to pristine {pin.version}:\n{error}")
            touched[name] = repo.git.diff("--name-only", before, "HEAD").splitlines()
    return work, repo, touched


@pytest.mark.parametrize("line", LINES)
def test_series_file_is_a_commented_quilt_series(line):
    text = (patches_dir(line) / SERIES_FILE).read_text().splitlines()
    assert text and text[0].startswith("#"), "the series file starts with a comment saying what it is"
    names = series_names(line)
    assert names and len(names) == len(set(names))
    # A patch keeps its number for life, in every line (the latest line's 0003 is production's
    # 0003 ported), so numbers rise in series order but need not be contiguous.
    numbers = [int(n[:4]) for n in names]
    assert all(re.fullmatch(r"\d{4}-[\w.-]+\.patch", n) for n in names), names
    assert numbers == sorted(set(numbers)), names
    on_disk = sorted(p.name for p in patches_dir(line).glob("*.patch"))
    assert on_disk == sorted(names), "every patch file is listed, every listed patch exists"


def test_a_patch_number_names_one_patch_in_every_line():
    subjects: dict[str, set[str]] = {}
    for line in LINES:
        for patch in read_series(line_root(line)).patches:
            subjects.setdefault(patch.name[:4], set()).add(patch.subject)
    assert all(len(s) == 1 for s in subjects.values()), subjects


@pytest.mark.parametrize("line", LINES)
def test_series_applies_cleanly_in_order(applied_trees, line):
    _, repo, touched = applied_trees(line)
    assert list(touched) == series_names(line)
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


@pytest.mark.parametrize("line,name", [(line, name) for line in LINES for name in series_names(line)])
def test_patch_explains_itself(applied_trees, tmp_path, line, name):
    _, repo, touched = applied_trees(line)
    entry = {p.name: p for p in read_series(line_root(line)).patches}[name]
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
            assert condition[len("check:") :] in CHECK_NAMES, condition
        else:
            assert condition.startswith("upstream>="), condition
            assert Version(condition[len("upstream>=") :]) > Version(read_pin(line_root(line)).version)
    assert [str(c) for c in entry.drop_when] == conditions
    # the trailers close the message
    assert list(trailers) == ["Upstream-Status", "Drop-When"]
    assert commit.message.rstrip().endswith("Drop-When: " + trailers["Drop-When"])


@pytest.mark.parametrize("line", LINES)
def test_patches_are_reproducible_exports(line):
    for name in series_names(line):
        text = (patches_dir(line) / name).read_text()
        assert text.startswith("From 0000000000000000000000000000000000000000 "), name
        assert "\nFrom: Kimi Fork Maintainers <maintainers@kimi-fork.invalid>\n" in text, name
        assert "\nDate: Wed, 2 Dec 2026 00:00:00 +0000\n" in text, name
        assert "\nSubject: [PATCH] " in text, name
        assert re.search(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40}", text, re.M), f"{name}: --full-index"
        assert not text.rstrip().endswith("-- \n2."), f"{name}: --no-signature"
