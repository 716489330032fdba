"""The image for real: `python build.py image` builds docker/Dockerfile, unchanged, on a real Docker
engine, and the built image serves EAGLE-3 decoding on the CPU.

The base is the test-only stand-in for upstream's lmsysorg/sglang:v0.5.9-cu130 (Docker Hub is
unreachable; tests/image_standin.py, differences in docs/deploy.md). Every RUN step of the product
Dockerfile runs: the FlashInfer install under the base's constraints, its import and signature
check, the overlay wheel install and its version assertion. Only FLASHINFER_PREBUILD_JIT=0 (no nvcc
in the base) and an empty cubin index (unreachable) differ from a production build. What only the
real CUDA base and a GPU can show is listed in docs/deploy.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import git
import image_standin
import pytest
import sglang_runtime
from docker_engine import private_engine
from helpers import REPO_ROOT, assert_one_line_error, commit_project, run_cli
from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke"))
import sglang_scripts as scripts  # noqa: E402

from sglpatch.queue.series import read_series
from sglpatch.ship import image
from sglpatch.upstream.pin import read_pin

# The production line's image. The latest line's is built and served in tests/test_image_latest.py,
# and both lines' images go through a registry in tests/test_image_registry.py.
pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.lines("production")]

PIN = read_pin(REPO_ROOT)
IMAGE_REPO = "sglpatch-test/sglang-kimi"
SOURCE_URL = "https://github.com/example/sglang-kimi"
# No nvcc in the stand-in base; FlashInfer's cubin index is unreachable here.
TEST_BUILD_ARGS = ("--build-arg", "FLASHINFER_PREBUILD_JIT=0", "--build-arg", "FLASHINFER_CUBIN_INDEX=")
CONTAINER_LABEL = "sglpatch.test=image"


def copy_project(dest: Path) -> Path:
    """This repository's pins, series, Dockerfiles and deploy templates (every line), committed in a
    fresh git repository."""
    dest.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "upstream.toml", dest / "upstream.toml")
    shutil.copytree(REPO_ROOT / "patches", dest / "patches")
    shutil.copytree(REPO_ROOT / "docker", dest / "docker")
    shutil.copytree(REPO_ROOT / "deploy", dest / "deploy")
    shutil.copy(REPO_ROOT / ".gitmodules", dest / ".gitmodules")
    for line in sorted((REPO_ROOT / "lines").iterdir()):  # the other lines' pins and series
        (dest / "lines" / line.name).mkdir(parents=True)
        shutil.copy(line / "upstream.toml", dest / "lines" / line.name / "upstream.toml")
        shutil.copytree(line / "patches", dest / "lines" / line.name / "patches")
    (dest / "upstream").mkdir()  # as a clone has it: the submodule not populated, the tree clean
    commit_project(dest, PIN.commit)
    return dest


def image_cli(project: Path, engine, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    env = {**engine.env(), image.SOURCE_ENV: SOURCE_URL}
    return run_cli(project, "image", "--repo", IMAGE_REPO, *args, env=env, timeout=timeout)


def layers(engine, ref: str) -> list[str]:
    return json.loads(engine.docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", ref).stdout)


def containers(engine) -> set[str]:
    return set(engine.docker("ps", "-aq", "--no-trunc").stdout.split())


def step_output(log: str, fragment: str) -> str:
    """What the BuildKit step whose command holds ``fragment`` printed ("CACHED" if it was)."""
    header = next(m for m in re.finditer(r"(?m)^#(\d+) \[\s*\d+/\d+\] (.*)$", log) if fragment in m.group(2))
    number = header.group(1)
    lines = re.findall(rf"(?m)^#{number} (.*)$", log)
    return "CACHED" if "CACHED" in lines else "\n".join(lines)


def in_image(engine, ref: str, program: str, **kwargs) -> subprocess.CompletedProcess:
    return engine.docker(
        "run", "--rm", "--label", CONTAINER_LABEL, "--entrypoint", "python3", ref, "-c", program, **kwargs
    )


# ---------------------------------------------------------------- the build


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return copy_project(tmp_path_factory.mktemp("image") / "project")


@pytest.fixture(scope="module")
def first_build(project, docker_engine, standin_base):
    start = time.monotonic()
    result = image_cli(project, docker_engine, "--base-image", standin_base, *TEST_BUILD_ARGS, "--json")
    assert result.returncode == 0, result.stderr[-8000:]
    sys.__stderr__.write(f"\n[docker] product image built in {time.monotonic() - start:.0f}s\n")
    data = json.loads(result.stdout)
    return data, result.stderr


def test_build_uses_the_standin_base_and_runs_every_step(first_build, docker_engine, standin_base):
    data, log = first_build
    ref = data["image"]
    assert ref == f"{IMAGE_REPO}:{PIN.local_version.replace('+', '-')}-cu130"
    assert data["build_args"]["BASE_IMAGE"] == standin_base
    # Every RUN step ran on this engine: now (it printed its check), or in an earlier build with the
    # same inputs (BuildKit says CACHED; the image carries its result all the same, checked below).
    for fragment, printed in (
        ("from flashinfer.comm import", "flashinfer 0.6.17 trtllm_comm targets sm_120: ok"),
        (
            "--force-reinstall",
            f"sglang {PIN.local_version} from /usr/local/lib/python3.11/dist-packages/sglang/__init__.py",
        ),
    ):
        outcome = step_output(log, fragment)
        assert outcome == "CACHED" or printed in outcome, f"{fragment!r}: {outcome[-3000:]}"
    facts = json.loads(
        in_image(
            docker_engine,
            ref,
            """
import importlib.metadata as md, importlib.util as iu, json
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
origin = iu.find_spec('sglang').origin
kimi = open(origin.replace('__init__.py', 'srt/models/kimi_k25.py')).read()
print(json.dumps({'sglang': version('sglang'), 'origin': origin, 'flashinfer': version('flashinfer-python'),
                  'cubin': version('flashinfer-cubin'), 'torch': version('torch'),
                  'delegates': 'def set_eagle3_layers_to_capture' in kimi}))
""",
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert facts == {
        "sglang": PIN.local_version,
        "origin": "/usr/local/lib/python3.11/dist-packages/sglang/__init__.py",
        "flashinfer": "0.6.17",
        "cubin": None,
        "torch": "2.9.1",
        "delegates": True,
    }


def test_pip_check_in_the_image_lists_only_the_known_conflicts(first_build, docker_engine):
    """FlashInfer 0.6.17 is a compatibility pin over what SGLang 0.5.9 declares (docs/deploy.md):
    these are the conflicts it brings, and any new one fails here."""
    out = in_image(
        docker_engine,
        first_build[0]["image"],
        "import runpy, sys; sys.argv = ['pip', 'check']; runpy.run_module('pip', run_name='__main__')",
        check=False,
    )
    found = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    assert found == {
        f"sglang {PIN.local_version} has requirement flashinfer_python==0.6.3, but you have flashinfer-python 0.6.17.",
        "quack-kernels 0.2.4 has requirement nvidia-cutlass-dsl<4.4.0,>=4.3.4, but you have nvidia-cutlass-dsl 4.8.1.",
        # only because the cubin index is unreachable here; production builds install 0.6.17's
        f"sglang {PIN.local_version} requires flashinfer-cubin, which is not installed.",
    }, out.stdout + out.stderr


def test_help_through_the_entrypoint(first_build, docker_engine):
    out = docker_engine.docker(
        "run", "--rm", "--label", CONTAINER_LABEL, first_build[0]["image"], "--help", check=False
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "usage:" in out.stdout and "--speculative-algorithm" in out.stdout


def test_labels_match_the_pin_and_the_series(first_build, docker_engine, project, standin_base):
    data, _ = first_build
    labels = json.loads(
        docker_engine.docker("image", "inspect", "--format", "{{json .Config.Labels}}", data["image"]).stdout
    )
    # The Dockerfile's labels as planned (the base image's own labels are inherited besides)
    assert {k: labels.get(k) for k in data["labels"]} == data["labels"]
    assert labels["org.opencontainers.image.version"] == PIN.local_version
    assert labels["org.opencontainers.image.revision"] == git.Repo(project).head.commit.hexsha  # not -dirty
    assert labels["org.opencontainers.image.base.name"] == standin_base
    assert labels["org.opencontainers.image.source"] == SOURCE_URL
    assert labels["sglpatch.upstream.version"] == PIN.version
    assert labels["sglpatch.upstream.commit"] == PIN.commit
    assert labels["sglpatch.series.version"] == f"{PIN.series_local}.{PIN.series_release}"
    assert labels["sglpatch.series.sha256"] == read_series(project).fingerprint()
    assert labels["sglpatch.flashinfer.version"] == "0.6.17"


def test_changing_one_patch_rebuilds_only_the_last_layer(first_build, docker_engine, project, standin_base):
    ref = first_build[0]["image"]
    before = layers(docker_engine, ref)
    wheel = project / "dist" / image.wheel_name(PIN)
    wheel_before = wheel.read_bytes()
    patch = next(p for p in sorted((project / "patches").glob("*.patch")) if p.name.startswith("0004"))
    text = patch.read_text()
    # A change no earlier run made (the wheel is reproducible: a repeated change would be cached).
    marker = f"Rebuilt by the layer-reuse test {uuid.uuid4().hex}."
    patch.write_text(text.replace("\nUpstream-Status:", f"\n{marker}\n\nUpstream-Status:", 1))
    repo = git.Repo(project)
    repo.git.add("-A")
    repo.git.commit("-qm", "change one patch", author="t <t@example.invalid>")
    result = image_cli(project, docker_engine, "--base-image", standin_base, *TEST_BUILD_ARGS)
    assert result.returncode == 0, result.stderr[-8000:]
    assert wheel.read_bytes() != wheel_before, "the patch change must reach the wheel"
    after = layers(docker_engine, ref)
    assert len(after) == len(before)
    assert after[:-1] == before[:-1], "every layer below the overlay wheel's is reused"
    assert after[-1] != before[-1], "the overlay wheel's layer is rebuilt"
    # The build output says the same per step: every step cached but the last RUN.
    steps = re.findall(r"(?m)^#(\d+) \[\s*(\d+)/(\d+)\] (\w+)", result.stderr)
    cached = set(re.findall(r"(?m)^#(\d+) CACHED$", result.stderr))
    total = int(steps[0][2])
    last_run = max(int(k) for _, k, _, kind in steps if kind == "RUN")
    assert last_run == total
    for number, k, _, kind in steps:
        if kind != "FROM":  # the base is resolved, not built: the layer list above covers it
            assert (number in cached) == (int(k) != total), (k, kind, result.stderr[-4000:])


def test_the_build_records_an_sbom_of_the_images_own_python_environment(first_build, docker_engine):
    data, log = first_build
    bom = json.loads(Path(data["inside"]["sbom"]).read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    main = bom["metadata"]["component"]
    assert main["type"] == "container" and main["bom-ref"] == data["image_id"]
    assert Path(data["inside"]["sbom"]).name == data["image_id"].replace(":", "-") + ".cdx.json"
    listed = {canonicalize_name(c["name"]): c["version"] for c in bom["components"]}
    seen = json.loads(
        in_image(
            docker_engine,
            data["image"],
            "import json, importlib.metadata as m; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions()}))",
        ).stdout
    )
    assert listed == {canonicalize_name(name): version for name, version in seen.items()}
    assert listed["sglang"] == PIN.local_version  # made in the product image, not its base or the host
    assert "cyclonedx-bom" not in listed  # the generator was mounted, never installed


def test_the_build_writes_a_vulnerability_report_that_says_what_it_covers(first_build):
    data, log = first_build
    report = json.loads(Path(data["inside"]["audit"]).read_text())
    assert f"vulnerabilities: {data['inside']['audit_summary']}" in log
    if report["audited"]:
        assert report["audited_as"] == {"sglang": PIN.version}
        assert {d["name"] for d in report["dependencies"]} >= {"sglang", "torch"}
    else:  # this machine's PyPI proxy serves no per-release JSON: the report says so, never "0 found"
        assert report["error"] and "not audited" in data["inside"]["audit_summary"]


# ---------------------------------------------------------------- the image serves EAGLE-3


def _container_state(engine, cid: str) -> dict:
    return json.loads(engine.docker("inspect", "--format", "{{json .State}}", cid).stdout)


def run_server(engine, ref: str, target: Path, draft: Path, *, extra: tuple[str, ...] = ()) -> str:
    args = scripts.server_args(scripts.engine_kwargs(Path("/models/target"), Path("/models/draft")))
    out = engine.docker(
        "run",
        "--detach",
        "--label",
        CONTAINER_LABEL,
        "-e",
        "SGLPATCH_CPU_HARNESS=1",
        "-e",
        "HF_HUB_OFFLINE=1",
        "-v",
        f"{target}:/models/target:ro",
        "-v",
        f"{draft}:/models/draft:ro",
        "-p",
        "127.0.0.1::30000",
        *extra,
        ref,
        *args,
        "--skip-server-warmup",
    )
    return out.stdout.strip()


def wait_for(engine, cid: str, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _container_state(engine, cid)
        if predicate(state):
            return state
        time.sleep(2)
    return _container_state(engine, cid)


def _logs(engine, cid: str) -> str:
    out = engine.docker("logs", cid, check=False)
    return out.stdout + out.stderr


def serve(engine, ref: str, pair, extra: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """Start ``ref``'s server on the tiny pair until healthy; one greedy /generate and /server_info;
    the container is removed. Returns (state, generated, server info)."""
    target, draft = pair
    start = time.monotonic()
    cid = run_server(engine, ref, target, draft, extra=extra)
    try:
        state = wait_for(engine, cid, lambda s: not s["Running"] or s["Health"]["Status"] == "healthy", timeout=900)
        assert state["Running"], f"the server exited ({state['ExitCode']}):\n{_logs(engine, cid)[-8000:]}"
        sys.__stderr__.write(f"\n[docker] container healthy after {time.monotonic() - start:.0f}s\n")
        port = engine.docker("port", cid, "30000/tcp").stdout.split()[0].rsplit(":", 1)[1]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/generate",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"text": scripts.PROMPTS[0], "sampling_params": scripts.GREEDY}).encode(),
        )
        with urllib.request.urlopen(request, timeout=600) as resp:
            generated = json.loads(resp.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=120) as resp:
            info = json.loads(resp.read())
        return state, generated, info
    finally:
        engine.docker("rm", "--force", cid, check=False)
        assert cid not in containers(engine)


@pytest.fixture(scope="module")
def served(first_build, docker_engine, always0_pair):
    return serve(docker_engine, first_build[0]["image"], always0_pair)


def test_container_turns_healthy_through_its_own_healthcheck(served):
    state, _, _ = served
    assert state["Health"]["Status"] == "healthy"
    assert state["Health"]["Log"][-1]["ExitCode"] == 0


def test_container_serves_eagle3_with_accept_length_above_1(served):
    _, out, _ = served
    meta = out["meta_info"]
    assert out["text"], out
    missing = [f for f in scripts.spec_fields(PIN.version).values() if f not in meta]
    assert not missing, f"/generate meta_info lacks {missing}: {sorted(meta)}"
    assert meta["spec_accept_length"] > 1, meta
    assert meta["completion_tokens"] == scripts.GREEDY["max_new_tokens"]


def test_container_reports_the_draft_configured_capture_layers_in_server_info(served, always0_pair):
    """A health check or deployment test can compare the layers the target captures with what
    the draft was trained on (patch 0005): /server_info names them and where they came from."""
    draft = json.loads((always0_pair[1] / "config.json").read_text())
    ids = (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    assert ids, "the premise: the tiny draft names its layers under eagle_config"
    info = served[2]
    got = info.get("eagle3_aux_hidden_state")
    assert got and got["layer_ids"] == ids, sorted(info)
    assert got["source"] == "draft config eagle_config.eagle_aux_hidden_state_layer_ids"
    assert len(got["captured_layers"]) == len(ids)


def test_pristine_wheel_in_the_image_fails_with_the_mission_error(first_build, docker_engine, always0_pair, runtime):
    """Negative control: upstream's pristine 0.5.9 wheel in front of ours, same image, same run."""
    target, draft = always0_pair
    pristine = runtime.overlay("pristine")
    ref = first_build[0]["image"]
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
        ref,
        "-c",
        "import importlib.util as iu; print(iu.find_spec('sglang').origin)",
    )
    assert which.stdout.strip() == "/opt/pristine-sglang/sglang/__init__.py"
    cid = run_server(docker_engine, ref, target, draft, extra=mount)
    try:
        state = wait_for(docker_engine, cid, lambda s: not s["Running"], timeout=600)
        logs = _logs(docker_engine, cid)
        assert not state["Running"], f"the pristine server is still running after 600s:\n{logs[-6000:]}"
        assert state["ExitCode"] != 0
        assert scripts.MISSING_METHOD in logs, logs[-8000:]
        assert state.get("Health", {}).get("Status") != "healthy"
    finally:
        docker_engine.docker("rm", "--force", cid, check=False)


# ---------------------------------------------------------------- bad input, for real


def test_missing_base_image_is_one_line_and_leaves_no_container(project, docker_engine):
    before = containers(docker_engine)
    result = image_cli(project, docker_engine, "--base-image", "sglpatch-test/absent:none", *TEST_BUILD_ARGS)
    assert_one_line_error(result, "base image sglpatch-test/absent:none is not in the Docker engine", "--base-image")
    assert containers(docker_engine) == before


def test_no_engine_is_one_line(project, docker_engine, tmp_path):
    env = {**docker_engine.env(), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = run_cli(project, "image", "--base-image", "x/y:z", env=env)
    assert_one_line_error(result, "no Docker engine is reachable")


def _start_image_run(project: Path, engine, base: str, log: Path) -> subprocess.Popen:
    env = {**engine.env(), image.SOURCE_ENV: SOURCE_URL}
    with open(log, "w") as fh:
        return subprocess.Popen(
            [
                sys.executable,
                str(REPO_ROOT / "build.py"),
                "--root",
                str(project),
                "image",
                "--repo",
                IMAGE_REPO,
                "--base-image",
                base,
                *TEST_BUILD_ARGS,
            ],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=env,
            start_new_session=True,
        )


def _wait_for_text(path: Path, needle: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"the build ended first:\n{path.read_text()[-4000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} not seen within {timeout:.0f}s:\n{path.read_text()[-4000:]}")


def test_second_run_and_engine_dying_mid_build(tmp_path_factory, docker_engine, request):
    """A build whose first step never ends (the base's python3 sleeps), on a private engine: a
    second `image` run in the same checkout is refused while it runs; then the engine is killed."""
    project = copy_project(tmp_path_factory.mktemp("dying") / "project")
    workdir = tmp_path_factory.mktemp("engine")
    cache = sglang_runtime.cache_dir()
    with private_engine(workdir) as engine:
        trap = image_standin.trap_base(engine, cache, "hang", "#!/bin/sh\nexec sleep 120\n")
        log = workdir / "first.log"
        first = _start_image_run(project, engine, trap, log)
        try:
            _wait_for_text(log, "RUN python3 -m pip freeze", first, timeout=600)
            second = image_cli(project, engine, "--base-image", trap, *TEST_BUILD_ARGS, timeout=120)
            assert_one_line_error(second, "another `build.py image` is running in this checkout", f"pid {first.pid}")
            engine.kill()
            first.wait(timeout=180)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, 9)
                first.wait()
        result = subprocess.CompletedProcess(first.args, first.returncode, "", log.read_text())
        assert_one_line_error(result, "the Docker engine stopped answering during the build")
    # The lock died with its holder: the next run is not refused.
    again = image_cli(project, docker_engine, "--base-image", "sglpatch-test/absent:none", *TEST_BUILD_ARGS)
    assert "another `build.py image`" not in again.stderr


def test_full_disk_is_one_line_and_leaves_no_container(tmp_path_factory, docker_engine):
    """A private engine whose data root is a 700 MB tmpfs; the base's python3 writes until it is full."""
    project = copy_project(tmp_path_factory.mktemp("full") / "project")
    workdir = tmp_path_factory.mktemp("engine")
    with private_engine(workdir, disk_mb=700) as engine:
        trap = image_standin.trap_base(
            engine, sglang_runtime.cache_dir(), "fill", "#!/bin/sh\nexec head -c 2000M /dev/zero > /var/tmp/fill\n"
        )
        result = image_cli(project, engine, "--base-image", trap, *TEST_BUILD_ARGS, timeout=900)
        assert_one_line_error(result, "the disk filled up during the image build")
        assert containers(engine) == set()
