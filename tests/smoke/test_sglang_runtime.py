"""The runtime fixture's own machinery, without SGLang (fast: the system Python stands in for the
runtime venv's). The smoke tests' "nothing left behind" and "a failure never takes pytest down"
rest on these."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sglang_runtime


@pytest.fixture
def bare_runtime(tmp_path) -> sglang_runtime.Runtime:
    """A Runtime whose 'venv' is this interpreter: enough for run() with variant=None."""
    rt = sglang_runtime.Runtime(cache=tmp_path, progress=lambda message: None)
    rt.python = Path(sys.executable)
    rt.leftover_grace = 1.0
    return rt


def test_run_captures_output_and_result(bare_runtime):
    script = sglang_runtime.emit_snippet() + (
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\nemit({'answer': 42})\nsys.exit(3)\n"
    )
    result = bare_runtime.run(script, variant=None, harness=False, timeout=60)
    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode == 3
    assert "to stdout" in result.stdout and "to stderr" in result.stderr
    assert result.result() == {"answer": 42}
    assert result.leftovers == []


def test_run_reports_and_kills_processes_left_behind(bare_runtime, tmp_path):
    pid_file = tmp_path / "orphan.pid"
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
    )
    result = bare_runtime.run(script, variant=None, harness=False, timeout=60)
    assert result.returncode == 0
    orphan = int(pid_file.read_text())
    assert len(result.leftovers) == 1 and result.leftovers[0].startswith(f"pid {orphan}:")
    time.sleep(0.5)
    assert not _alive(orphan), "the leftover process was not killed"


def test_run_timeout_kills_the_session_and_keeps_the_output(bare_runtime, tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timeout:
        bare_runtime.run(script, variant=None, harness=False, timeout=3)
    assert time.monotonic() - start < 30
    assert "started" in str(timeout.value)
    time.sleep(0.5)
    assert not _alive(int(pid_file.read_text()))


def test_a_process_group_kill_inside_the_run_cannot_reach_pytest(bare_runtime):
    """A run killing its whole process group (as SGLang's SIGQUIT handlers kill their tree) ends
    only its own session: run in pytest's group, this would kill pytest itself."""
    script = "import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)\n"
    result = bare_runtime.run(script, variant=None, harness=False, timeout=60)
    assert result.returncode == -9  # and pytest is still alive to check it


def test_venv_without_a_matching_stamp_is_not_trusted(tmp_path):
    rt = sglang_runtime.Runtime(cache=tmp_path, progress=lambda message: None)
    (rt.venv / "bin").mkdir(parents=True)
    (rt.venv / "bin" / "python").symlink_to(sys.executable)
    assert not rt.is_complete()  # half-made: no stamp
    (rt.venv / sglang_runtime.STAMP).write_text(rt._stamp_content())
    assert rt.is_complete()
    stale = json.loads(rt._stamp_content())
    stale["requirements_sha256"] = "0" * 64
    (rt.venv / sglang_runtime.STAMP).write_text(json.dumps(stale, sort_keys=True))
    assert not rt.is_complete()  # made from other requirements: rebuilt by ensure()
    (rt.venv / sglang_runtime.STAMP).write_text(rt._stamp_content())
    (rt.venv / "bin" / "python").unlink()
    assert not rt.is_complete()  # its interpreter is gone


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_every_line_has_its_own_pinned_runtime(tmp_path):
    """One venv per line's SGLang release, from that release's pinned requirements."""
    venvs = set()
    for line in sglang_runtime.line_names():
        rt = sglang_runtime.Runtime(cache=tmp_path, progress=lambda message: None, line=line)
        assert rt.venv.name == f"sglang-{rt.pin.version}"
        assert rt.requirements.is_file(), rt.requirements
        text = rt.requirements.read_text()
        assert text.startswith(f"# SGLang {rt.pin.version}'s runtime dependencies")
        assert "\nsglang==" not in text, "the sglang package comes from a variant overlay"
        venvs.add(rt.venv)
    assert len(venvs) == len(sglang_runtime.line_names()) >= 2
