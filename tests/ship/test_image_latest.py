"""The latest line's image for real: `python build.py --line latest image` builds docker/Dockerfile
on a stand-in for upstream's lmsysorg/sglang:v0.5.23-cu130, and the built image serves EAGLE-3.

The stand-in (tests/image_standin.py): 0.5.23 is a wheel-only release (no sdist on PyPI), so it
installs the cp311 wheel into Debian bookworm's Python 3.11 site-packages, on the line's pinned
runtime requirements (torch 2.14.1, flashinfer-python 0.7.2). Upstream's image runs Python 3.12
and installs SGLang editable from a git clone under /sgl-workspace/sglang; the context holds the
overlay wheel for every CPython and pip in the image picks cp311 here (docs/lines.md, "Images").

Negative control: on 0.5.23 upstream's pristine wheel serves KimiK25 with EAGLE-3 too (the
interface fix landed upstream), so "it serves" proves nothing about the series. What only this
line's series does is patch 0005: the server resolves the draft's capture layers and reports them
in /server_info. The same image with the pristine wheel in front serves, and lacks that field.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from helpers import REPO_ROOT
from test_image_build import CONTAINER_LABEL, TEST_BUILD_ARGS, copy_project, image_cli, in_image, scripts, serve

from sglpatch.upstream.pin import read_pin

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.lines("latest")]

LINE_PIN = read_pin(REPO_ROOT / "lines" / "latest")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("latest-image") / "project")


@pytest.fixture(scope="module")
def latest_build(project, docker_engine, standin_base):
    start = time.monotonic()
    result = image_cli(
        project, docker_engine, "--line", "latest", "--base-image", standin_base, *TEST_BUILD_ARGS, "--json"
    )
    assert result.returncode == 0, result.stderr[-8000:]
    sys.__stderr__.write(f"\n[docker] latest line's image built in {time.monotonic() - start:.0f}s\n")
    return json.loads(result.stdout)


def test_the_latest_image_carries_the_lines_overlay_for_the_bases_python(latest_build, docker_engine):
    assert latest_build["image"].endswith(f":{LINE_PIN.version}-kimi.{LINE_PIN.series_release}-cu130")
    found = in_image(
        docker_engine,
        latest_build["image"],
        "import importlib.metadata as m, sys; print(m.version('sglang'), "
        "m.version('flashinfer-python'), sys.version_info[:2])",
    ).stdout.split(maxsplit=2)
    assert found[:2] == [LINE_PIN.local_version, "0.7.2"] and found[2].strip() == "(3, 11)"
    labels = latest_build["labels"]
    assert labels["sglpatch.upstream.version"] == LINE_PIN.version
    assert labels["org.opencontainers.image.version"] == LINE_PIN.local_version


def test_the_latest_image_serves_eagle3_and_reports_the_capture_layers(latest_build, docker_engine, always0_pair):
    state, out, info = serve(docker_engine, latest_build["image"], always0_pair)
    assert state["Health"]["Status"] == "healthy"
    meta = out["meta_info"]
    missing = [f for f in scripts.spec_fields(LINE_PIN.version).values() if f not in meta]
    assert not missing, f"/generate meta_info lacks {missing}: {sorted(meta)}"
    assert meta["spec_accept_length"] > 1, meta
    draft = json.loads((always0_pair[1] / "config.json").read_text())
    ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert info["eagle3_aux_hidden_state"]["layer_ids"] == ids, sorted(info)


def test_pristine_0_5_23_in_the_same_image_serves_but_without_the_series(
    latest_build, docker_engine, always0_pair, runtime
):
    """Negative control: upstream's pristine wheel in front of ours, same image, same run."""
    pristine = runtime.overlay("pristine")
    mount = (
        "-v",
        f"{pristine}:/opt/pristine-sglang:ro",
        "-e",
        "PYTHONPATH=/opt/pristine-sglang:/opt/sglpatch-cpu-harness",
    )
    which = docker_engine.docker(
        "run",
        "--rm",
        "--label",
        CONTAINER_LABEL,
        *mount,
        "--entrypoint",
        "python3",
        latest_build["image"],
        "-c",
        "import importlib.util as iu; print(iu.find_spec('sglang').origin)",
    )
    assert which.stdout.strip() == "/opt/pristine-sglang/sglang/__init__.py"
    _, out, info = serve(docker_engine, latest_build["image"], always0_pair, extra=mount)
    assert out["meta_info"]["spec_accept_length"] > 1  # upstream serves it too on 0.5.23
    assert "eagle3_aux_hidden_state" not in info, sorted(info)
