"""A git environment that makes every commit and export reproducible (``sglpatch.git.env``): the
maintainer's global and system configuration is not read, and no setting of the work repository's
own configuration changes a patch, a hunk read or a commit."""

from __future__ import annotations

from pathlib import Path

import git
import pytest
from helpers import make_upstream
from patch_queues import KIMI, RUNNER, one_file_queue, project, two_patch_queue, upstream  # noqa: F401  (fixtures)

from sglpatch.git.env import FIXED_IDENTITY
from sglpatch.queue import hunks
from sglpatch.queue.patch_queue import PatchQueue


def test_the_work_repositorys_own_git_configuration_changes_no_patch_and_stops_no_command(tmp_path, upstream):
    """Configuration in the work tree's own repository (numbered subjects, a subject prefix,
    another diff algorithm, commit hooks that refuse) must neither change an exported patch nor
    stop a command: exports are compared byte for byte with the series, so any drift reads as an
    edit. (The maintainer's global and system configuration is not read at all: the next test.)"""
    path = "python/sglang/srt/algorithm.txt"  # a change myers and histogram put differently
    root, queue, text = one_file_queue(
        tmp_path, upstream, path, "a\n}\nx\n}\nb\n", "{\nb\n\nx\n{\n}\n", "algorithm: rewrite"
    )
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("pre-commit", "commit-msg"):  # git am's own hooks run: a test interrupts push with one
        (hooks / hook).write_text("#!/bin/sh\necho refused by a hook of the maintainer >&2\nexit 1\n")
        (hooks / hook).chmod(0o755)
    with queue.repo.config_writer() as config:
        config.set_value("format", "numbered", "true")
        config.set_value("format", "subjectPrefix", "RFC")
        config.set_value("diff", "algorithm", "histogram")
        config.set_value("core", "hooksPath", str(hooks))
    queue.push()
    (commit,) = queue.applied_commits()
    assert commit.committed_date == commit.authored_date  # the same commit on every machine
    queue.export()
    assert (root / "patches" / "0001-one.patch").read_text() == text
    (queue.path / path).write_text("{\nb\n")
    queue.refresh()
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    queue.new("0002-kimi", "kimi: a class\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    exported = (root / "patches" / "0002-kimi.patch").read_text()
    assert "Subject: [PATCH] kimi: a class" in exported and "RFC" not in exported


def test_the_maintainers_global_and_system_git_configuration_is_not_read(project, tmp_path, monkeypatch):
    """A maintainer's ~/.gitconfig and /etc/gitconfig (commits signed with a key not at hand, a
    hooks directory whose applypatch-msg refuses, no a/ b/ prefixes, a To: header, their own name)
    would stop every command or change every patch; the queue's git reads neither. The twin: the
    same files do stop a plain `git am` and `git commit`, and change a plain `git format-patch`."""
    root, queue = project
    home, system, hooks = tmp_path / "home", tmp_path / "gitconfig", tmp_path / "hooks"
    home.mkdir()
    hooks.mkdir()
    (hooks / "applypatch-msg").write_text("#!/bin/sh\necho refused by a global hook >&2\nexit 1\n")
    (hooks / "applypatch-msg").chmod(0o755)
    (home / ".gitconfig").write_text(
        "[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = false\n"
        "[diff]\n\tnoprefix = true\n"
        "[user]\n\tname = Maintainer\n\temail = m@example.invalid\n"
    )
    system.write_text(f"[core]\n\thooksPath = {hooks}\n[format]\n\tto = list@example.invalid\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(system))
    for name in (
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "XDG_CONFIG_HOME",
        "EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)
    before = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    queue.push(all=True)
    queue.export()
    assert {p.name: p.read_bytes() for p in (root / "patches").iterdir()} == before
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    queue.new("0003-kimi", "kimi: a class\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    exported = (root / "patches" / "0003-kimi.patch").read_text()
    assert f"--- a/{KIMI}" in exported and "To: " not in exported and "Maintainer" not in exported
    commits = queue.applied_commits()
    assert {(c.author.name, c.committer.name, c.committer.email) for c in commits[2:]} == {
        (FIXED_IDENTITY[0], *FIXED_IDENTITY)
    }
    assert {(c.committer.name, c.committer.email) for c in commits} == {FIXED_IDENTITY}
    plain = queue.repo.git.format_patch("--stdout", "-1", "HEAD")
    assert f"--- {KIMI}" in plain and "To: list@example.invalid" in plain
    with pytest.raises(git.GitCommandError, match="gpg failed to sign"):
        queue.repo.git.commit("--allow-empty", "-qm", "by hand")
    queue.repo.git.reset("--quiet", "--hard", "HEAD^")
    with pytest.raises(git.GitCommandError, match="refused by a global hook"):
        queue.repo.git.am(str(root / "patches" / "0003-kimi.patch"))


AUTHOR_DATE = "2026-01-01T00:00:00+00:00"


def round_trip(root: Path, queue: PatchQueue):
    """A new patch (a non-ASCII path, CRLF lines, a trailing blank, two hunks eight lines apart)
    exported, re-applied from scratch and exported again: the patch files and the hunks read back."""
    queue.push(all=True)
    runner = (queue.path / RUNNER).read_text()
    (queue.path / RUNNER).write_text(runner.replace("line 20\n", "line twenty \n").replace("line 28\n", "line 28!\n"))
    (queue.path / "python/sglang/srt/caf\u00e9.txt").write_bytes(b"one\r\ntwo\r\n")
    queue.new("0003-edge", "edge: every kind of line\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    ranges = hunks._head_hunk_ranges(queue.repo)
    queue.pop(all=True)
    queue.push(all=True)
    queue.export()
    return {p.name: p.read_bytes() for p in sorted((root / "patches").iterdir())}, ranges


@pytest.fixture(scope="module")
def plain_round_trip(tmp_path_factory):
    """The round trip in a repository without any setting: what each configured one must give."""
    tmp = tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("GIT_AUTHOR_DATE", AUTHOR_DATE)
        expected = round_trip(*two_patch_queue(tmp / "plain", make_upstream(tmp / "upstream")))
    assert "caf\\303\\251.txt" in expected[0]["0003-edge.patch"].decode()
    assert len(expected[1][RUNNER]) == 2
    return expected


@pytest.mark.parametrize(
    "key, value",
    [
        ("core.quotePath", "false"),
        ("core.autocrlf", "true"),
        ("apply.whitespace", "fix"),
        ("color.ui", "always"),
        ("color.diff", "always"),
        ("diff.context", "1"),
        ("diff.interHunkContext", "5"),
        ("diff.noprefix", "true"),
        ("diff.mnemonicPrefix", "true"),
        ("diff.srcPrefix", "q/"),
        ("diff.external", "/bin/false"),
        ("format.to", "list@example.invalid"),
        ("format.cc", "list@example.invalid"),
        ("format.headers", "X-Poison: 1"),
        ("format.thread", "shallow"),
        ("format.signOff", "true"),
        ("format.from", "true"),
        ("format.useAutoBase", "true"),
    ],
)
def test_no_setting_of_the_work_repositorys_own_configuration_changes_a_patch_or_a_hunk_read(
    tmp_path, upstream, plain_round_trip, monkeypatch, key, value
):
    """Each setting would change what git writes or applies (a quoted path, CRLF, whitespace, colour,
    context, prefixes, mail headers); the same round trip with and without it gives the same bytes."""
    monkeypatch.setenv("GIT_AUTHOR_DATE", AUTHOR_DATE)
    expected = plain_round_trip
    root, queue = two_patch_queue(tmp_path / "configured", upstream)
    queue.repo.git.config(key, value)
    assert round_trip(root, queue) == expected
