"""Getting pristine upstream releases: the real PyPI artifacts, checksums, and no network."""

from __future__ import annotations

import contextlib
import shutil
import signal
from pathlib import Path

import pytest

from helpers import REPO_ROOT, LocalIndex, assert_one_line_error, make_project, run_cli
from sglpatch.upstream import artifacts, source
from sglpatch.errors import UserError
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


def test_pinned_release_imports_from_the_real_sdist(pinned_commit):
    commit, _ = pinned_commit
    tree = source.pristine_tree(PIN.version, PIN)
    assert (tree / "python/sglang/srt/models/kimi_k25.py").is_file()
    assert (tree / "python/pyproject.toml").is_file()
    text = (tree / "python/sglang/srt/models/kimi_k25.py").read_text()
    assert "class KimiK25ForConditionalGeneration" in text
    assert "set_eagle3_layers_to_capture" not in text  # the bug this fork exists for
    message = source.open_mirror().commit(commit).message
    assert PIN.artifact("sdist").sha256 in message
    assert source.release_artifact(PIN.version, "wheel", PIN).name == PIN.artifact("wheel").filename


@pytest.fixture(scope="module")
def pinned_commit():
    """The pinned release in the default cache (downloaded once, then reused)."""
    return source.prepare(PIN, REPO_ROOT), source.release_artifact(PIN.version, "sdist", PIN)


def test_import_is_reproducible(pinned_commit, isolated_cache):
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    # Same artifact, fresh mirror: the same commit, so work trees and exports agree everywhere.
    assert source.import_release(PIN.version, PIN) == commit


def test_wheel_only_release_imports_from_its_wheel():
    tree = source.pristine_tree("0.5.12")
    assert (tree / "python/sglang/srt/models/kimi_k25.py").is_file()
    assert not list((tree / "python").rglob("*.so"))
    assert not list((tree / "python").glob("*.dist-info"))


def test_a_wheel_import_keeps_the_executable_bits_the_wheel_records(isolated_cache):
    """0.5.23 (the latest line's release) ships only wheels; amx_utils.py is executable in them,
    so a patch to it must say 100755, not turn it into 100644 on re-export."""
    import os
    import zipfile
    latest = read_pin(REPO_ROOT / "lines" / "latest")
    wheel = latest.artifact("wheel")
    shared = Path.home() / ".cache" / "sglpatch" / "artifacts" / wheel.filename
    (isolated_cache / "artifacts").mkdir(parents=True)
    if shared.exists():  # warm machine: no download; a fresh import into the isolated mirror either way
        shutil.copy(shared, isolated_cache / "artifacts" / wheel.filename)
    executable = "sglang/srt/layers/amx_utils.py"
    path = source.release_artifact("0.5.23", "wheel", latest)
    assert (zipfile.ZipFile(path).getinfo(executable).external_attr >> 16) & 0o111, "the premise"
    commit = source.import_release("0.5.23", latest)
    listing = source.open_mirror().git.ls_tree("-r", commit, "--", f"python/{executable}",
                                               "python/sglang/srt/models/kimi_k25.py")
    modes = {path: mode for mode, _, _, path in (line.split(None, 3) for line in listing.splitlines())}
    assert modes == {f"python/{executable}": "100755", "python/sglang/srt/models/kimi_k25.py": "100644"}
    assert os.access(source.pristine_tree("0.5.23", latest) / "python" / executable, os.X_OK)


def test_second_run_needs_no_network(tmp_path, pinned_commit):
    source.release_artifact(PIN.version, "wheel", PIN)  # sdist and wheel now cached
    root = make_project(tmp_path / "p", {})
    result = run_cli(root, "build", env={"SGLPATCH_INDEX_URL": UNREACHABLE})
    assert result.returncode == 0, result.stderr


def test_no_network_and_no_cache(tmp_path, isolated_cache):
    root = make_project(tmp_path / "p", {})
    result = run_cli(root, "build", env={"SGLPATCH_INDEX_URL": UNREACHABLE,
                                         "SGLPATCH_CACHE": str(isolated_cache)})
    assert_one_line_error(result, "cannot reach the package index", "connect to PyPI")


def test_checksum_mismatch_of_a_download_is_a_hard_error(tmp_path, isolated_cache, local_index):
    local_index.publish(PIN.artifact("sdist").filename, b"not the real sdist")
    root = make_project(tmp_path / "p", {})
    result = run_cli(root, "build", env={"SGLPATCH_INDEX_URL": local_index.url, "SGLPATCH_CACHE": str(isolated_cache)})
    assert_one_line_error(result, "checksum mismatch", PIN.artifact("sdist").filename, PIN.artifact("sdist").sha256)
    assert not (isolated_cache / "artifacts" / PIN.artifact("sdist").filename).exists()
    assert not list((isolated_cache / "mirror").glob("refs/tags/release/*"))


def test_checksum_mismatch_of_a_cached_file(isolated_cache):
    name = PIN.artifact("wheel").filename
    (isolated_cache / "artifacts").mkdir(parents=True)
    (isolated_cache / "artifacts" / name).write_bytes(b"corrupted")
    with pytest.raises(UserError, match="checksum mismatch"):
        source.release_artifact(PIN.version, "wheel", PIN)
    assert (isolated_cache / "artifacts" / f"{name}.sha256-mismatch").exists()


def test_unknown_version(isolated_cache, local_index):
    local_index.publish("sglang-0.5.9.tar.gz", b"x")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLPATCH_INDEX_URL", local_index.url)
        with pytest.raises(UserError, match="SGLang 0.0.42 is not on the package index"):
            source.pristine_tree("0.0.42")
        with pytest.raises(UserError, match="not a PEP 440 version"):
            source.pristine_tree("latest-please")


def test_an_import_shares_no_scratch_file_with_other_processes(pinned_commit, isolated_cache, tmp_path,
                                                               monkeypatch):
    """A git process of someone else's holding ``$TMPDIR/index.lock`` (as a concurrent import once
    did: the scratch index was ``$TMPDIR/index``) does not disturb an import."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (scratch / "index.lock").write_text("held by another git process")
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    assert source.import_release(PIN.version, PIN) == commit
    assert sorted(p.name for p in scratch.iterdir()) == ["index.lock"]


def test_a_platform_wheel_release_has_one_wheel_kind_per_x86_64_cpython(isolated_cache, local_index,
                                                                         monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    for tag in ("cp313-cp313-manylinux_2_34_x86_64", "cp311-cp311-manylinux_2_34_x86_64",
                "cp312-cp312-manylinux_2_34_aarch64", "cp312-cp312-manylinux_2_34_x86_64",
                "cp310-cp310-manylinux_2_34_x86_64", "cp39-cp39-manylinux_2_28_x86_64"):
        local_index.publish(f"sglang-2.0.0-{tag}.whl", tag.encode())
    local_index.publish("sglang-2.1.0-py3-none-any.whl", b"pure")
    # in the order of the Python versions, not of their names (3.9 before 3.10)
    assert source.wheel_kinds("2.0.0") == ["wheel", "wheel-cp39", "wheel-cp310", "wheel-cp312", "wheel-cp313"]
    assert source.wheel_kinds("2.1.0") == ["wheel"]
    import hashlib
    named = {a.kind: (a.filename, a.sha256) for a in source.index_artifacts("2.0.0")}
    assert list(named) == ["wheel", "wheel-cp39", "wheel-cp310", "wheel-cp312", "wheel-cp313"]  # no sdist
    assert named["wheel-cp312"] == ("sglang-2.0.0-cp312-cp312-manylinux_2_34_x86_64.whl",
                                    hashlib.sha256(b"cp312-cp312-manylinux_2_34_x86_64").hexdigest())
    local_index.publish("sglang-2.1.0.tar.gz", b"source")
    source._CACHED_LISTING.clear()
    assert [a.kind for a in source.index_artifacts("2.1.0")] == ["sdist", "wheel"]
    # a pure wheel installs on every Python: the platform wheels beside it are never needed
    local_index.publish("sglang-2.2.0-py3-none-any.whl", b"pure")
    local_index.publish("sglang-2.2.0-cp312-cp312-manylinux_2_34_x86_64.whl", b"platform")
    assert source.wheel_kinds("2.2.0") == ["wheel"]
    assert source.release_artifact("2.2.0", "wheel").read_bytes() == b"pure"
    assert source.release_artifact("2.2.0", "wheel-cp311") is None and source.release_artifact("2.2.0", "sdist") is None
    # each kind is that CPython's x86_64 wheel, sha256-verified against the index
    assert source.release_artifact("2.0.0", "wheel").name == "sglang-2.0.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    path = source.release_artifact("2.0.0", "wheel-cp312")
    assert path.name == "sglang-2.0.0-cp312-cp312-manylinux_2_34_x86_64.whl"
    assert path.read_bytes() == b"cp312-cp312-manylinux_2_34_x86_64"


def test_a_wrong_pin_sha256_fails_though_the_real_release_is_cached_and_in_the_mirror(pinned_commit, isolated_cache,
                                                                                      tmp_path, monkeypatch):
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    assert source.import_release(PIN.version, PIN) == commit  # verified and in the mirror
    root = make_project(tmp_path / "p", {})
    right = PIN.artifact("sdist").sha256
    wrong = right[::-1]
    (root / "upstream.toml").write_text((root / "upstream.toml").read_text().replace(right, wrong))
    result = run_cli(root, "prepare", env={"SGLPATCH_INDEX_URL": UNREACHABLE, "SGLPATCH_CACHE": str(isolated_cache)})
    assert_one_line_error(result, "checksum mismatch", sdist.name, "upstream.toml", wrong, right)
    # the twin: the right pin, same cache, offline: the mirror's record of the artifact verifies it
    monkeypatch.setenv("SGLPATCH_INDEX_URL", UNREACHABLE)
    assert source.import_release(PIN.version, PIN) == commit


def test_the_released_versions_are_the_final_ones_not_withdrawn_oldest_first(isolated_cache, local_index,
                                                                            monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url + "/")  # a trailing slash is no extra path step
    for name in ("sglang-0.5.10-py3-none-any.whl", "sglang-0.5.9.tar.gz", "sglang-0.5.9-py3-none-any.whl",
                 "sglang-0.5.2.tar.gz", "sglang-0.5.11rc1-py3-none-any.whl", "sglang-0.5.11.dev3.tar.gz",
                 "sglang-latest.zip", "sglang-not-a-version.tar.gz", "sglang.whl"):
        local_index.publish(name, name.encode())
    local_index.publish("sglang-0.5.12.tar.gz", b"withdrawn", yanked="a broken build")
    local_index.publish("sglang-0.5.13-py3-none-any.whl", b"withdrawn", yanked=True)
    assert source.released_versions() == ["0.5.2", "0.5.9", "0.5.10"]
    # a withdrawn file is offered for nothing: its release is not on the index
    with pytest.raises(UserError, match="SGLang 0.5.12 is not on the package index"):
        source.release_artifact("0.5.12", "sdist")
    assert source.release_artifact("0.5.10", "wheel").read_bytes() == b"sglang-0.5.10-py3-none-any.whl"
    assert source.release_artifact("0.5.10", "sdist") is None  # a wheel-only release


def test_a_download_that_breaks_off_leaves_no_file_and_says_so(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-3.0.0.tar.gz", b"the release")
    (local_index.directory / "files" / "sglang-3.0.0.tar.gz").unlink()  # listed, but gone
    with pytest.raises(UserError) as error:
        source.release_artifact("3.0.0", "sdist")
    assert str(error.value) == ("download of sglang-3.0.0.tar.gz failed (File not found): "
                                "check the connection to PyPI and rerun")
    assert sorted(p.name for p in (isolated_cache / "artifacts").iterdir()) == []


@pytest.fixture
def stalled_server():
    """A loopback address that accepts connections (the kernel's backlog does) and never answers."""
    import socket
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@contextlib.contextmanager
def hang_fails_after(seconds: int):
    """A call that ignores its timeout fails the test here instead of hanging the suite."""
    def hung(signum, frame):
        raise AssertionError(f"still waiting after {seconds} s: the timeout was not applied")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_stalled_server_answers_nothing(stalled_server):
    """The twin of the two tests below: without a timeout, a request to it would wait for ever."""
    import socket
    host, port = stalled_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=0.3) as client:
        client.sendall(b"GET /simple/sglang/ HTTP/1.0\r\n\r\n")
        with pytest.raises(TimeoutError):
            client.recv(1)


def test_a_stalled_index_is_one_error_not_a_hang(isolated_cache, stalled_server, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", f"{stalled_server}/simple")
    monkeypatch.setattr(artifacts, "INDEX_TIMEOUT", 0.5)
    with pytest.raises(UserError) as error, hang_fails_after(30):
        source.released_versions()
    assert str(error.value) == (f"cannot reach the package index {stalled_server}/simple/sglang/ (timed out): "
                                "connect to PyPI once so the artifact can be cached")


def test_a_stalled_download_is_one_error_and_leaves_no_file(isolated_cache, stalled_server, monkeypatch, tmp_path):
    monkeypatch.setattr(artifacts, "DOWNLOAD_TIMEOUT", 0.5)
    target = tmp_path / "sglang-3.0.0.tar.gz"
    with pytest.raises(UserError) as error, hang_fails_after(30):
        source._download(source.RemoteFile(target.name, f"{stalled_server}/files/{target.name}", "0" * 64), target)
    assert str(error.value) == ("download of sglang-3.0.0.tar.gz failed (timed out): "
                                "check the connection to PyPI and rerun")
    assert list(tmp_path.iterdir()) == []


def on_a_terminal(code: str, env: dict) -> tuple[str, str]:
    """Run ``code`` in a child whose stderr is a terminal: (its stdout, what the terminal shows)."""
    import os
    import pty
    import subprocess
    import sys
    main, terminal = pty.openpty()
    done = subprocess.run([sys.executable, "-c", code], stderr=terminal, stdout=subprocess.PIPE, env=env,
                          timeout=120, check=True)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    return done.stdout.decode().strip(), shown.decode().replace("\r\n", "\n")


def test_a_download_shows_its_progress_on_a_terminal_only(isolated_cache, local_index):
    """On a terminal one line counts up to 100 % (in MiB when the size is not sent); into a file or
    a pipe nothing is written."""
    import os
    import subprocess
    import sys
    data = os.urandom(3 << 20)  # three blocks of a MiB
    local_index.publish("sglang-3.1.0.tar.gz", data)
    local_index.publish("sglang-3.2.0.tar.gz", data, sized=False)
    code = "from sglpatch.upstream import source; print(source.release_artifact('{}', 'sdist').stat().st_size)"
    # the child imports sglpatch from where this process did (a mutant's copy under mutation testing)
    here = str(Path(source.__file__).resolve().parents[2])
    env = {**os.environ, "SGLPATCH_INDEX_URL": local_index.url, "SGLPATCH_CACHE": str(isolated_cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    label = "downloading sglang-3.1.0.tar.gz"
    assert on_a_terminal(code.format("3.1.0"), env) == (
        str(len(data)), f"\r{label}: 33%\r{label}: 66%\r{label}: 100%\n")
    label = "downloading sglang-3.2.0.tar.gz"
    assert on_a_terminal(code.format("3.2.0"), env) == (
        str(len(data)), f"\r{label}: 1 MiB\r{label}: 2 MiB\r{label}: 3 MiB\n")
    (isolated_cache / "artifacts" / "sglang-3.1.0.tar.gz").unlink()
    quiet = subprocess.run([sys.executable, "-c", code.format("3.1.0")], capture_output=True, env=env,
                           timeout=120, check=True)
    assert quiet.stderr == b""


class Terminal:
    """A stderr that is a terminal and shows only what was flushed to it (a real one shows
    nothing of a line without its newline until then)."""

    def __init__(self):
        self.buffered, self.shown = "", []

    def isatty(self):
        return True

    def write(self, text):
        self.buffered += text

    def flush(self):
        self.shown.append(self.buffered)
        self.buffered = ""


def test_a_download_s_progress_is_shown_while_it_runs(isolated_cache, local_index, monkeypatch):
    """Each figure reaches the terminal when it is printed, not with the last line."""
    import os
    import sys
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-3.1.0.tar.gz", os.urandom(2 << 20))
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    source.release_artifact("3.1.0", "sdist")
    label = "downloading sglang-3.1.0.tar.gz"
    assert terminal.shown[:2] == [f"\r{label}: 50%", f"\r{label}: 100%"]


def test_an_index_listing_without_files_lists_no_release(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-0.5.9.tar.gz", b"x")
    (local_index.directory / "simple" / "sglang" / "index.html").write_text('{"meta": {"api-version": "1.1"}}')
    assert source.released_versions() == []
    with pytest.raises(UserError, match="SGLang 0.5.9 is not on the package index"):
        source.release_artifact("0.5.9", "sdist")


def test_a_git_error_is_told_by_git_s_last_line_without_gitpython_s_framing():
    import git
    error = git.exc.GitCommandError(["git", "update-ref"], 128, stderr="error: one\nfatal: the last word X\n")
    assert source._git_reason(error) == "fatal: the last word X"
    assert source._git_reason(git.exc.GitCommandError(["git", "fsck"], 1, stderr="")) == "GitCommandError"
    assert source._git_reason(git.exc.NoSuchPathError("/nowhere")) == "NoSuchPathError"
    assert source._git_reason(git.exc.InvalidGitRepositoryError("/tmp")) == "not a git repository"


def test_a_release_without_an_sdist_or_a_wheel_this_python_takes_is_one_error(isolated_cache, local_index,
                                                                             monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-4.0.0-cp39-cp39-manylinux_2_28_x86_64.whl", b"only for 3.9")
    with pytest.raises(UserError) as error:
        source.import_release("4.0.0")
    assert str(error.value) == "SGLang 4.0.0 has neither an sdist nor a usable wheel on the index: pick another release"


def test_the_index_is_pypi_unless_the_environment_names_another(monkeypatch):
    monkeypatch.delenv("SGLPATCH_INDEX_URL", raising=False)
    assert source.index_url() == "https://pypi.org/simple"
    monkeypatch.setenv("SGLPATCH_INDEX_URL", "http://127.0.0.1:9/mirror/simple//")
    assert source.index_url() == "http://127.0.0.1:9/mirror/simple"
    monkeypatch.setenv("SGLPATCH_INDEX_URL", "http://127.0.0.1:9/PYPI-INDEX/")  # only slashes go
    assert source.index_url() == "http://127.0.0.1:9/PYPI-INDEX"


def test_an_artifact_kind_nobody_names_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown artifact kind 'tarball'"):
        source._choose([], "tarball")


def test_a_pin_naming_only_a_wheel_imports_that_wheel_though_the_index_has_an_sdist(isolated_cache, local_index,
                                                                                     monkeypatch):
    """A pin without an sdist names the wheel its release is made from: that wheel is imported,
    verified against the pin, never the sdist the index also offers. The twin: a pin naming the
    sdist imports the sdist."""
    import io
    import zipfile
    from helpers import sdist_bytes
    from sglpatch.upstream.pin import Artifact
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    pins = {}
    for version, kind in (("5.0.0", "wheel"), ("5.1.0", "sdist")):
        sdist = f"sglang-{version}.tar.gz"
        shas = {"sdist": local_index.publish(sdist, sdist_bytes(version, {"python/sglang/origin.py": "FROM = 'sdist'\n"}))}
        raw = io.BytesIO()
        with zipfile.ZipFile(raw, "w") as whl:
            whl.writestr("sglang/origin.py", "FROM = 'wheel'\n")
            whl.writestr(f"sglang-{version}.dist-info/METADATA", f"Name: sglang\nVersion: {version}\n")
        wheel = f"sglang-{version}-py3-none-any.whl"
        shas["wheel"] = local_index.publish(wheel, raw.getvalue())
        named = {"sdist": sdist, "wheel": wheel}[kind]
        pins[version] = PIN.with_release(version, f"v{version}", None, (Artifact(kind, named, shas[kind]),))
    imported = {version: source.open_mirror().git.show(f"{source.import_release(version, pin)}:python/sglang/origin.py")
                for version, pin in pins.items()}
    assert imported == {"5.0.0": "FROM = 'wheel'", "5.1.0": "FROM = 'sdist'"}


def test_an_sdist_member_that_climbs_out_of_the_tree_is_refused_and_written_nowhere(isolated_cache, local_index,
                                                                                     monkeypatch, tmp_path):
    """An artifact is verified against the pin, not trusted: an sdist member named ``../../../x``
    (or a wheel's ``../x``) is one error naming it, with nothing written outside the import's tree
    and nothing imported. The twin: the same sdist without it imports."""
    import io
    import tempfile
    import zipfile
    from helpers import sdist_bytes
    from sglpatch.errors import UserError
    from sglpatch.upstream.pin import Artifact
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    files = {"python/sglang/origin.py": "FROM = 'sdist'\n"}
    for version, climbing in (("6.0.0", True), ("6.1.0", False)):
        sdist = f"sglang-{version}.tar.gz"
        extra = {"python/../../../escaped.py": "ESCAPED = True\n"} if climbing else {}
        sha = local_index.publish(sdist, sdist_bytes(version, files | extra))
        pin = PIN.with_release(version, f"v{version}", None, (Artifact("sdist", sdist, sha),))
        if climbing:
            with pytest.raises(UserError, match=r"sglang-6\.0\.0\.tar\.gz holds \.\./\.\./\.\./escaped\.py, which "
                                                r"would be written outside its tree"):
                source.import_release(version, pin)
            assert list((tmp_path / "tmp").iterdir()) == [] and not (tmp_path / "escaped.py").exists()
            assert "release/6.0.0" not in [t.name for t in source.open_mirror().tags]
        else:
            assert source.open_mirror().git.show(f"{source.import_release(version, pin)}:python/sglang/origin.py") \
                == "FROM = 'sdist'"
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as whl:
        whl.writestr("sglang/origin.py", "FROM = 'wheel'\n")
        whl.writestr("../escaped.py", "ESCAPED = True\n")
    wheel = "sglang-6.2.0-py3-none-any.whl"
    pin = PIN.with_release("6.2.0", "v6.2.0", None, (Artifact("wheel", wheel, local_index.publish(wheel, raw.getvalue())),))
    with pytest.raises(UserError, match=r"sglang-6\.2\.0-py3-none-any\.whl holds \.\./escaped\.py, which would be"):
        source.import_release("6.2.0", pin)
    assert list((tmp_path / "tmp").iterdir()) == [], "nothing beside the import's tree"


def test_the_mirror_check_runs_the_git_gitpython_is_told_to(tmp_path, monkeypatch):
    """An operator may point GitPython at another git (GIT_PYTHON_GIT_EXECUTABLE): the object
    check, which runs git itself, runs that one too. The twin: through it, a lost blob is found."""
    import git
    repo = git.Repo.init(tmp_path / "mirror")
    (tmp_path / "mirror" / "a.py").write_text("x = 1\n")
    repo.git.add("a.py")
    repo.git.commit("-qm", "one file", env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                                           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    commit = repo.head.commit.hexsha
    log = tmp_path / "calls"
    wrapper = tmp_path / "operators-git"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec git "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", str(wrapper))
    assert source._commit_problem(repo, commit) is None
    assert any(line.endswith("cat-file --batch-check") for line in log.read_text().splitlines()), log.read_text()
    blob = repo.git.rev_parse("HEAD:a.py")
    (Path(repo.git_dir) / "objects" / blob[:2] / blob[2:]).unlink()
    assert source._commit_problem(repo, commit) == f"points to a commit {commit[:12]} whose tree lacks 1 file objects"
