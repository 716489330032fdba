"""Builders for real temporary git repositories and patch series used by the unit tests."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import git

REPO_ROOT = Path(__file__).resolve().parent.parent
AUTHOR_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}

UPSTREAM_FILES = {
    "python/sglang/srt/models/kimi_k25.py": "class KimiK25:\n    def forward(self):\n        return 1\n",
    "python/sglang/srt/model_executor/model_runner.py": "".join(f"line {i}\n" for i in range(1, 41)),
    "python/pyproject.toml": "[project]\nname = 'sglang'\n",
}


def load_module(name: str, path: Path):
    """Import a file that is not on sys.path (a benchmark, a generator) as module ``name``; it is
    registered in sys.modules, where dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def commit_files(repo: git.Repo, files: dict[str, str | None], message: str) -> str:
    root = Path(repo.working_tree_dir)
    for rel, text in files.items():
        path = root / rel
        if text is None:
            repo.index.remove([rel], working_tree=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        repo.index.add([rel])
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("--quiet", "--allow-empty", "-m", message)
    return repo.head.commit.hexsha


def make_upstream(path: Path, files: dict[str, str] | None = None) -> tuple[git.Repo, str]:
    repo = git.Repo.init(path)
    return repo, commit_files(repo, files or UPSTREAM_FILES, "upstream release")


def patch_text(upstream: git.Repo, base: str, files: dict[str, str | None], message: str) -> str:
    """A real `git format-patch` file for ``files`` changed on top of ``base``."""
    upstream.git.checkout("--quiet", "--detach", base)
    commit_files(upstream, files, message)
    text = upstream.git.format_patch(
        "--stdout", "--zero-commit", "--no-signature", "--full-index", "-1", "HEAD", strip_newline_in_stdout=False
    )
    upstream.git.checkout("--quiet", "--detach", base)
    return text


def message(subject: str, status: str = "Pending", drop: str = "check:example") -> str:
    return f"{subject}\n\nWhy this change exists.\n\nUpstream-Status: {status}\nDrop-When: {drop}\n"


def make_project(path: Path, patches: dict[str, str], series: list[str] | None = None) -> Path:
    (path / "patches").mkdir(parents=True)
    # The fork's required checks hold only with our series; test series start from a bare pin.
    pin = (REPO_ROOT / "upstream.toml").read_text()
    (path / "upstream.toml").write_text(re.sub(r"(?m)^checks = .*$", "checks = []", pin))
    for name, text in patches.items():
        (path / "patches" / name).write_text(text)
    names = list(patches) if series is None else series
    (path / "patches" / "series").write_text("# test series\n" + "".join(f"{n}\n" for n in names))
    return path


def run_cli(root: Path, *args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run `build.py` as a user would, in a child process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "build.py"), "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=full_env,
        **kwargs,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


class LocalIndex:
    """A PEP 691 package index on loopback serving the files a test publishes."""

    def __init__(self, directory: Path):
        import http.server
        import threading

        self.directory = directory
        self.files: dict[str, bytes] = {}
        self.yanked: dict[str, bool | str] = {}
        self.unsized: set[str] = set()
        index = self

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(directory), **kwargs)

            def do_GET(self):
                if "//" in self.path:  # a URL joined with a doubled slash is no page of PyPI's
                    self.send_error(404)
                    return
                # PyPI answers a project page in JSON only when asked for it (PEP 691); else HTML
                accepted = {kind.split(";")[0].strip() for kind in self.headers.get("Accept", "").split(",")}
                if self.path.startswith("/simple/") and "application/vnd.pypi.simple.v1+json" not in accepted:
                    body = b"<!DOCTYPE html><html><body>a PEP 503 page</body></html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                name = self.path.removeprefix("/files/")
                if name in index.unsized:  # sent without Content-Length: the size is known at the end
                    body = (directory / "files" / name).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.end_headers()
                    self.wfile.write(body)
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/simple"
        # shutdown() waits for the loop's next poll: at the default 0.5 s, half a second per test
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def publish(self, name: str, data: bytes, *, yanked: bool | str = False, sized: bool = True) -> str:
        """Serve ``name``; ``yanked`` (PEP 592: True or the reason) marks it withdrawn; ``sized``
        False sends it without a Content-Length."""
        import hashlib
        import json

        self.files[name] = data
        if yanked:
            self.yanked[name] = yanked
        if not sized:
            self.unsized.add(name)
        listing = {
            "files": [
                {
                    "filename": n,
                    "url": f"{self.base}/files/{n}",
                    "hashes": {"sha256": hashlib.sha256(d).hexdigest()},
                    **({"yanked": self.yanked[n]} if n in self.yanked else {}),
                }
                for n, d in self.files.items()
            ]
        }
        (self.directory / "simple" / "sglang").mkdir(parents=True, exist_ok=True)
        (self.directory / "simple" / "sglang" / "index.html").write_text(json.dumps(listing))
        (self.directory / "files").mkdir(exist_ok=True)
        (self.directory / "files" / name).write_bytes(data)
        return hashlib.sha256(data).hexdigest()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sdist_bytes(version: str, files: dict[str, str]) -> bytes:
    """A release sdist whose root is upstream's python/ directory, as SGLang's are."""
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for rel, text in sorted(files.items()):
            assert rel.startswith("python/")
            data = text.encode()
            info = tarfile.TarInfo(f"sglang-{version}/{rel[len('python/') :]}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def pin_text(version: str, sdist_sha256: str) -> str:
    return (
        f'[upstream]\nrepo = "https://example.invalid/sglang"\nversion = "{version}"\n'
        f'tag = "v{version}"\ncommit = ""\n\n[upstream.artifacts.sdist]\n'
        f'filename = "sglang-{version}.tar.gz"\nsha256 = "{sdist_sha256}"\n\n'
        '[series]\nlocal = "kimi"\nrelease = 3\n'
    )


def commit_project(root: Path, upstream_commit: str) -> git.Repo:
    """Make a project directory a git repository with the upstream submodule gitlink, as ours is."""
    repo = git.Repo.init(root)
    repo.git.add("--all")
    repo.git.update_index("--add", "--cacheinfo", f"160000,{upstream_commit},upstream")
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("-qm", "project")
    return repo
