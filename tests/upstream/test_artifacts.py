"""A release's PyPI artifacts (``sglpatch.upstream.artifacts``): the package index's listing, the
choice of sdist or wheel, the download (progress, stall timeout) and the sha256 check."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest
from helpers import assert_one_line_error, make_project, run_cli
from release_cache import PIN, UNREACHABLE, isolated_cache, local_index  # noqa: F401  (fixtures)

from sglpatch.errors import UserError
from sglpatch.upstream import artifacts, source


def test_no_network_and_no_cache(tmp_path, isolated_cache):
    root = make_project(tmp_path / "p", {})
    result = run_cli(root, "build", env={"SGLPATCH_INDEX_URL": UNREACHABLE, "SGLPATCH_CACHE": str(isolated_cache)})
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


def test_a_platform_wheel_release_has_one_wheel_kind_per_x86_64_cpython(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    for tag in (
        "cp313-cp313-manylinux_2_34_x86_64",
        "cp311-cp311-manylinux_2_34_x86_64",
        "cp312-cp312-manylinux_2_34_aarch64",
        "cp312-cp312-manylinux_2_34_x86_64",
        "cp310-cp310-manylinux_2_34_x86_64",
        "cp39-cp39-manylinux_2_28_x86_64",
    ):
        local_index.publish(f"sglang-2.0.0-{tag}.whl", tag.encode())
    local_index.publish("sglang-2.1.0-py3-none-any.whl", b"pure")
    # in the order of the Python versions, not of their names (3.9 before 3.10)
    assert source.wheel_kinds("2.0.0") == ["wheel", "wheel-cp39", "wheel-cp310", "wheel-cp312", "wheel-cp313"]
    assert source.wheel_kinds("2.1.0") == ["wheel"]
    import hashlib

    named = {a.kind: (a.filename, a.sha256) for a in source.index_artifacts("2.0.0")}
    assert list(named) == ["wheel", "wheel-cp39", "wheel-cp310", "wheel-cp312", "wheel-cp313"]  # no sdist
    assert named["wheel-cp312"] == (
        "sglang-2.0.0-cp312-cp312-manylinux_2_34_x86_64.whl",
        hashlib.sha256(b"cp312-cp312-manylinux_2_34_x86_64").hexdigest(),
    )
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


def test_the_released_versions_are_the_final_ones_not_withdrawn_oldest_first(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url + "/")  # a trailing slash is no extra path step
    for name in (
        "sglang-0.5.10-py3-none-any.whl",
        "sglang-0.5.9.tar.gz",
        "sglang-0.5.9-py3-none-any.whl",
        "sglang-0.5.2.tar.gz",
        "sglang-0.5.11rc1-py3-none-any.whl",
        "sglang-0.5.11.dev3.tar.gz",
        "sglang-latest.zip",
        "sglang-not-a-version.tar.gz",
        "sglang.whl",
    ):
        local_index.publish(name, name.encode())
    local_index.publish("sglang-0.5.12.tar.gz", b"withdrawn", yanked="a broken build")
    local_index.publish("sglang-0.5.13-py3-none-any.whl", b"withdrawn", yanked=True)
    assert source.released_versions() == ["0.5.2", "0.5.9", "0.5.10"]
    # a withdrawn file is offered for nothing, and its release is named as yanked, with the reason
    with pytest.raises(
        UserError, match=r"^SGLang 0\.5\.12 was yanked from the package index \(a broken build\): name another"
    ):
        source.release_artifact("0.5.12", "sdist")
    with pytest.raises(UserError, match=r"^SGLang 0\.5\.13 was yanked from the package index: name another"):
        source.release_artifact("0.5.13", "wheel")
    with pytest.raises(UserError, match="SGLang 0.5.14 is not on the package index"):  # the twin: never listed
        source.release_artifact("0.5.14", "sdist")
    assert source.release_artifact("0.5.10", "wheel").read_bytes() == b"sglang-0.5.10-py3-none-any.whl"
    assert source.release_artifact("0.5.10", "sdist") is None  # a wheel-only release


def test_a_download_that_breaks_off_leaves_no_file_and_says_so(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-3.0.0.tar.gz", b"the release")
    (local_index.directory / "files" / "sglang-3.0.0.tar.gz").unlink()  # listed, but gone
    with pytest.raises(UserError) as error:
        source.release_artifact("3.0.0", "sdist")
    assert str(error.value) == (
        "download of sglang-3.0.0.tar.gz failed (File not found): check the connection to PyPI and rerun"
    )
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
    assert str(error.value) == (
        f"cannot reach the package index {stalled_server}/simple/sglang/ (timed out): "
        "connect to PyPI once so the artifact can be cached"
    )


def test_a_stalled_download_is_one_error_and_leaves_no_file(isolated_cache, stalled_server, monkeypatch, tmp_path):
    monkeypatch.setattr(artifacts, "DOWNLOAD_TIMEOUT", 0.5)
    target = tmp_path / "sglang-3.0.0.tar.gz"
    with pytest.raises(UserError) as error, hang_fails_after(30):
        source._download(source.RemoteFile(target.name, f"{stalled_server}/files/{target.name}", "0" * 64), target)
    assert str(error.value) == (
        "download of sglang-3.0.0.tar.gz failed (timed out): check the connection to PyPI and rerun"
    )
    assert list(tmp_path.iterdir()) == []


def on_a_terminal(code: str, env: dict) -> tuple[str, str]:
    """Run ``code`` in a child whose stderr is a terminal: (its stdout, what the terminal shows)."""
    import os
    import pty
    import subprocess
    import sys

    main, terminal = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-c", code], stderr=terminal, stdout=subprocess.PIPE, env=env, timeout=120, check=True
    )
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
    env = {
        **os.environ,
        "SGLPATCH_INDEX_URL": local_index.url,
        "SGLPATCH_CACHE": str(isolated_cache),
        "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
    }
    label = "downloading sglang-3.1.0.tar.gz"
    assert on_a_terminal(code.format("3.1.0"), env) == (
        str(len(data)),
        f"\r{label}: 33%\r{label}: 66%\r{label}: 100%\n",
    )
    label = "downloading sglang-3.2.0.tar.gz"
    assert on_a_terminal(code.format("3.2.0"), env) == (
        str(len(data)),
        f"\r{label}: 1 MiB\r{label}: 2 MiB\r{label}: 3 MiB\n",
    )
    (isolated_cache / "artifacts" / "sglang-3.1.0.tar.gz").unlink()
    quiet = subprocess.run(
        [sys.executable, "-c", code.format("3.1.0")], capture_output=True, env=env, timeout=120, check=True
    )
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
