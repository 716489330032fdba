"""CHANGELOG.md in Keep a Changelog form (``sglpatch.queue.changelog``): a rebase's entry goes
under ``### Changed`` of ``## [Unreleased]``, read and written as UTF-8."""

from __future__ import annotations

import pytest
from helpers import commit_project, run_cli
from test_rebase import OLD_COMMIT, env, make_repo  # noqa: F401  (env is a fixture)


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_the_changelog_is_read_as_utf8_whatever_the_locale(env, locale):
    """An operator's shell in the POSIX locale (Python's default encoding is then ASCII) still
    gets the entry added to a CHANGELOG holding non-ASCII words; the twin is a UTF-8 locale."""
    root = make_repo(env, ["clean"])
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n- déjà vu\n", encoding="utf-8")
    commit_project(root, OLD_COMMIT)
    shell = {**env["env"], "LC_ALL": locale, "LANG": locale, "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = run_cli(root, "rebase", "--onto", "1.1.0", env=shell)
    assert result.returncode == 0, result.stderr
    text = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "- déjà vu" in text and "Rebased onto SGLang 1.1.0: kept 0001-clean.patch" in text


def test_the_rebase_entry_goes_under_changed_in_unreleased(env):
    """Keep a Changelog: a rebase is a change. Its entry is a bullet under `### Changed` of
    `## [Unreleased]`, added to the section when it exists (one heading, the earlier bullet kept
    first) and made when it does not (beside the `### Added` already there)."""
    for earlier in ("### Added\n- a new thing\n", "### Changed\n- an earlier change\n"):
        root = make_repo(env, ["clean"])
        (root / "CHANGELOG.md").write_text(f"# Changelog\n\n## [Unreleased]\n\n{earlier}\n## [0.1.0]\n- first\n")
        commit_project(root, OLD_COMMIT)
        assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 0
        text = (root / "CHANGELOG.md").read_text()
        unreleased = text.split("## [Unreleased]")[1].split("## [0.1.0]")[0]
        assert unreleased.count("### Changed") == 1 and "### None" not in text
        changed = unreleased.split("### Changed")[1].split("###")[0]
        assert "Rebased onto SGLang 1.1.0" in changed
        if "earlier change" in earlier:
            assert changed.index("- an earlier change") < changed.index("Rebased onto SGLang 1.1.0")
        else:
            assert "- a new thing" in unreleased.split("### Added")[1]
        root.rename(root.with_name(f"project-{len(earlier)}"))
