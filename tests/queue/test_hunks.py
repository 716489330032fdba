"""Per-file and per-hunk verdicts of a patch replayed on a new release (``sglpatch.queue.hunks``):
which files and hunks went through, which moved, which conflict."""

from __future__ import annotations

from helpers import commit_files, make_upstream, message, patch_text
from test_rebase import OTHER, RUNNER, env, make_repo  # noqa: F401  (env is a fixture)

from sglpatch.queue import hunks, rebase


def test_verdicts_per_file_and_per_hunk(env):
    root = make_repo(env, ["clean", "moved", "conflict", "textual"])
    report = rebase.start(root, "1.1.0", dry_run=True)
    files = {p["name"].split("-", 1)[1].removesuffix(".patch"): p["file_verdicts"] for p in report["patches"]}
    (clean,) = files["clean"]
    assert (clean["path"], clean["verdict"], [h["verdict"] for h in clean["hunks"]]) == (OTHER, "clean", ["clean"])
    (moved,) = files["moved"]  # upstream put five lines on top: the hunk applies 5 lines further down
    assert (moved["verdict"], moved["hunks"][0]["verdict"]) == ("merged", "merged")
    assert moved["hunks"][0]["detail"].startswith("moved by +5 lines")
    (conflict,) = files["conflict"]  # upstream rewrote the very line: the hunk's own lines are given
    assert conflict["verdict"] == "conflict"
    assert "-line 10" in conflict["hunks"][0]["lines"] and "+line ten" in conflict["hunks"][0]["lines"]
    assert files["textual"] == [], "obsolete by Drop-When: no file is tried"
    text = rebase.format_report(report)
    assert f"    {RUNNER}: merged (1 merged); moved by +5 lines" in text
    assert f"    {RUNNER}: conflict (1 conflict); does not apply, even three-way; @@ -7" in text


def test_each_file_of_a_patch_gets_its_own_verdict_whatever_its_name_holds(tmp_path):
    """A patch to "a b/c.txt" (the path holds " b/") and to a plain file: split at whitespace, the
    first file's hunk was filed under the plain one, or lost, and its verdict with it."""
    repo, base = make_upstream(tmp_path / "up")
    spaced, plain = "python/a b/c.txt", "python/plain.txt"
    rows = "".join(f"row {i}\n" for i in range(1, 21))
    repo.git.checkout("--quiet", "--detach", base)
    start = commit_files(repo, {spaced: rows, plain: rows}, "two files")
    patch = patch_text(
        repo,
        start,
        {spaced: rows.replace("row 10\n", "row ten\n"), plain: rows.replace("row 3\n", "row three\n")},
        message("two files"),
    )
    commit_files(repo, {spaced: rows.replace("row 10\n", "upstream's ten\n")}, "upstream rewrites row 10")
    verdicts = {f.path: f.verdict for f in hunks.verdicts(repo, patch)}
    assert verdicts == {spaced: "merged", plain: "clean"}  # merged: until git's three-way merge says more
