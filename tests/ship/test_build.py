"""`python build.py`: the real 0.5.9 release + a series -> checked tree -> installable overlay wheel."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import git
import pytest
from helpers import REPO_ROOT, assert_one_line_error, make_project, message, run_cli

from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
KIMI = "python/sglang/srt/models/kimi_k25.py"
MARKER = "SGLPATCH_TEST_MARKER = 'patched'"


@pytest.fixture(scope="module")
def pristine():
    source.prepare(PIN, REPO_ROOT)
    return source.pristine_tree(PIN.version, PIN)


def real_patch(
    pristine: Path, tmp: Path, subject: str, drop: str = "upstream>=0.5.12", new_text: str | None = None
) -> str:
    """A format-patch file that appends a marker to the real kimi_k25.py of the pinned release."""
    repo = git.Repo.init(tmp)
    target = tmp / KIMI
    target.parent.mkdir(parents=True)
    original = (pristine / KIMI).read_text()
    target.write_text(original)
    repo.index.add([KIMI])
    repo.index.commit("base")
    target.write_text(new_text if new_text is not None else original + f"\n{MARKER}\n")
    repo.index.add([KIMI])
    repo.index.commit(message(subject, drop=drop))
    return repo.git.format_patch(
        "--stdout", "--zero-commit", "--no-signature", "--full-index", "-1", "HEAD", strip_newline_in_stdout=False
    )


@pytest.fixture(scope="module")
def built(pristine, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    root = make_project(tmp / "project", {"0001-marker.patch": real_patch(pristine, tmp / "p", "kimi: marker")})
    result = run_cli(root, "--json")
    assert result.returncode == 0, result.stderr
    return root, json.loads(result.stdout)


def test_summary_names_pin_patches_wheel_and_hash(built):
    root, data = built
    wheel = Path(data["wheel"])
    assert wheel == root / "dist" / "sglang-0.5.9+kimi.2-py3-none-any.whl"
    assert data["upstream"]["commit"] == PIN.commit
    assert data["patches"] == ["0001-marker.patch"]
    assert data["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert data["replaced"] == ["sglang/srt/models/kimi_k25.py"]
    text = run_cli(root).stdout
    assert "SGLang 0.5.9" in text and "0001-marker.patch" in text and data["sha256"] in text


def test_overlay_wheel_record_is_correct_and_only_patched_files_differ(built):
    root, data = built
    upstream = source.release_artifact(PIN.version, "wheel", PIN)
    with zipfile.ZipFile(data["wheel"]) as whl, zipfile.ZipFile(upstream) as orig:
        info = "sglang-0.5.9+kimi.2.dist-info"
        rows = list(csv.reader(io.StringIO(whl.read(f"{info}/RECORD").decode())))
        assert {r[0] for r in rows} == set(whl.namelist())
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                continue
            blob = whl.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(blob), name
        assert "Version: 0.5.9+kimi.2" in whl.read(f"{info}/METADATA").decode()
        assert whl.read(f"{info}/WHEEL") == orig.read("sglang-0.5.9.dist-info/WHEEL")
        differing = [n for n in orig.namelist() if n.startswith("sglang/") and whl.read(n) != orig.read(n)]
        assert differing == ["sglang/srt/models/kimi_k25.py"]
        assert MARKER in whl.read("sglang/srt/models/kimi_k25.py").decode()
        provenance = json.loads(whl.read(f"{info}/sglpatch.json"))
        assert provenance["upstream"]["commit"] == PIN.commit
        assert [p["name"] for p in provenance["patches"]] == ["0001-marker.patch"]


def test_rebuild_is_byte_identical(built):
    root, data = built
    again = run_cli(root, "build", "--rebuild", "--json")
    assert "reused" not in again.stderr  # built again for real: the wheel writer is deterministic
    assert json.loads(again.stdout)["sha256"] == data["sha256"]


def test_pip_install_over_upstream_runs_the_patched_code(built, tmp_path):
    root, data = built
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    upstream = source.release_artifact(PIN.version, "wheel", PIN)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run(pip + [str(upstream)], check=True)
    subprocess.run(pip + [data["wheel"]], check=True)
    probe = (
        "import importlib.metadata as m, importlib.util as u, pathlib;"
        "spec = u.find_spec('sglang');"
        "root = pathlib.Path(spec.origin).parent;"
        "print(m.version('sglang'));"
        "ns = {}; exec(compile((root / 'srt/models/kimi_k25.py').read_text().split('\\n\\n')[-1], 'm', 'exec'), ns);"
        "print(ns['SGLPATCH_TEST_MARKER'])"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0.5.9+kimi.2", "patched"]
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    assert {"name": "sglang", "version": "0.5.9+kimi.2"} in json.loads(listed)


def test_build_refuses_a_dirty_work_tree_and_keeps_the_edit(built):
    root, _ = built
    edited = root / "build" / "src" / KIMI
    edited.write_text(edited.read_text() + "# my work in progress\n")
    result = run_cli(root)
    assert_one_line_error(result, "uncommitted edits", KIMI)
    assert edited.read_text().endswith("# my work in progress\n")
    git.Repo(root / "build" / "src").git.checkout("--", KIMI)


def test_patch_without_trailers_fails_the_build(pristine, tmp_path):
    patch = real_patch(pristine, tmp_path / "p", "kimi: marker").replace("Upstream-Status: Pending\n", "")
    root = make_project(tmp_path / "project", {"0001-marker.patch": patch})
    assert_one_line_error(run_cli(root), "0001-marker.patch", "no Upstream-Status")


def test_patch_naming_an_unknown_check_fails_the_build(pristine, tmp_path):
    patch = real_patch(pristine, tmp_path / "p", "kimi: marker", drop="check:no-such-check")
    root = make_project(tmp_path / "project", {"0001-marker.patch": patch})
    assert_one_line_error(run_cli(root), "unknown check 'no-such-check'")


def test_patch_that_breaks_python_fails_the_build(pristine, tmp_path):
    broken = (pristine / KIMI).read_text() + "\ndef broken(:\n"
    root = make_project(
        tmp_path / "project",
        {"0001-broken.patch": real_patch(pristine, tmp_path / "p", "kimi: break", new_text=broken)},
    )
    assert_one_line_error(run_cli(root), KIMI, "does not compile")
    assert not (root / "dist").exists()


def test_missing_dependency_is_one_line(tmp_path):
    # -S hides site-packages, where GitPython is installed
    result = subprocess.run(
        [sys.executable, "-S", str(REPO_ROOT / "build.py")], capture_output=True, text=True, cwd=tmp_path
    )
    assert_one_line_error(result, "missing Python package git", "pip install -r requirements.txt")


def test_missing_git_program_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "build.py"), "status"],
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert_one_line_error(result, "git program was not found", "install git")
