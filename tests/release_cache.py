"""Fixtures and names the tests of ``sglpatch.upstream`` share (tests/upstream/test_source.py,
test_artifacts.py, test_mirror.py, test_trees.py, test_cache_integrity.py): the pin of the checkout,
an isolated cache, a package index on loopback, the pinned release imported once per module, and a
project pinned to a small synthetic release (``env``)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest
from helpers import REPO_ROOT, LocalIndex, pin_text, sdist_bytes

from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
UNREACHABLE = "http://127.0.0.1:9/simple"


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SGLPATCH_CACHE", str(cache))
    source._CACHED_LISTING.clear()
    yield cache
    source._CACHED_LISTING.clear()


@pytest.fixture
def local_index(tmp_path):
    index = LocalIndex(tmp_path / "index")
    yield index
    index.close()


@pytest.fixture(scope="module")
def pinned_commit():
    """The pinned release in the default cache (downloaded once, then reused)."""
    return source.prepare(PIN, REPO_ROOT), source.release_artifact(PIN.version, "sdist", PIN)


SDIST = "sglang-1.0.0.tar.gz"
OTHER = "python/sglang/srt/other.py"
FILES = {
    "python/sglang/srt/models/kimi_k25.py": "class KimiK25:\n    def forward(self):\n        return 1\n",
    OTHER: "VALUE = 1\n",
    "python/pyproject.toml": "[project]\nname = 'sglang'\n",
}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A project pinned to SGLang 1.0.0 (and a 1.1.0 beside it) served from a loopback index,
    with its cache in tmp_path."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SGLPATCH_CACHE", str(cache))
    index = LocalIndex(tmp_path / "index")
    monkeypatch.setenv("SGLPATCH_INDEX_URL", index.url)
    source._CACHED_LISTING.clear()
    sha = index.publish(SDIST, sdist_bytes("1.0.0", FILES))
    index.publish("sglang-1.1.0.tar.gz", sdist_bytes("1.1.0", {**FILES, OTHER: "VALUE = 2\n"}))
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("# empty\n")
    (root / "upstream.toml").write_text(pin_text("1.0.0", sha))
    yield SimpleNamespace(
        root=root,
        cache=cache,
        sha=sha,
        index=index,
        mirror=cache / "mirror",
        artifact=cache / "artifacts" / SDIST,
        env={"SGLPATCH_CACHE": str(cache)},
    )
    index.close()
    source._CACHED_LISTING.clear()


def mirror_git(env, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(env.mirror), *args], check=True, capture_output=True, text=True
    ).stdout.strip()
