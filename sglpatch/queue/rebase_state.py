"""The journal of a rebase in progress, ``build/rebase/state.json``: the patches it carries, the
verdict and commit of each finished step, the step it stopped at."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.repo import Repo, current_branch, pinned_env, run
from sglpatch.queue.line import line_of
from sglpatch.queue.transaction_journal import boundary

STATE_DIR = Path("build") / "rebase"
REBASE_BRANCH = "sglpatch-rebase"


@dataclass
class State:
    """The rebase journal. Each patch is known by its identity (name and sha256 of the file the
    rebase started from, copied into ``build/rebase/patches/``) and each finished step by the
    commit made for it, never by position alone."""

    onto: str
    old_version: str
    commit: str | None  # the upstream commit for the gitlink (--commit)
    patches: list[dict]  # the series at the start: {"name", "sha256"}, replayed in this order
    new_base: str | None = None
    old_base: str | None = None  # the release the series was on: upstream's moves are from it
    steps: list[dict] = field(default_factory=list)  # Verdict fields + "commit"
    current: dict | None = None  # the patch being applied: name, sha256, head_before, stopped

    def save(self, root: Path) -> None:
        path = root / STATE_DIR / "state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        boundary("rebase:state")

    @classmethod
    def load(cls, root: Path) -> State | None:
        path = root / STATE_DIR / "state.json"
        if not path.exists():
            return None
        try:
            state = cls(**json.loads(path.read_text()))
            [(p["name"], p["sha256"]) for p in state.patches]  # noqa: B018  (shape check)
            return state
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            raise UserError(
                f"the rebase journal {path} is damaged",
                f"`{line_of(root).command('rebase', '--abort')}` returns to the state before the rebase",
            ) from None

    def verdicts(self) -> list[dict]:
        return [
            {**{k: s[k] for k in ("name", "verdict", "detail", "files")}, "file_verdicts": s.get("file_verdicts", [])}
            for s in self.steps
        ]


def patch_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def drop_scratch_state(root: Path, repo: Repo) -> None:
    """Drop the rebase's own scratch state once its transaction ended."""
    with pinned_env(repo):
        if run(repo, "branch", "--list", REBASE_BRANCH).strip() and current_branch(repo) != REBASE_BRANCH:
            run(repo, "branch", "--quiet", "-D", REBASE_BRANCH)
    shutil.rmtree(root / STATE_DIR, ignore_errors=True)
