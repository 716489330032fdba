"""The Blackwell CUDA 13 image: Dockerfile, build context, `image --dry-run`, labels, workflow, docs.

No Docker engine or GPU is needed: what can be checked on a CPU machine is checked for real (the
Dockerfile with hadolint, the context with the real overlay wheel from `sglpatch.ship.build.build`,
the FlashInfer pin against the real PyPI wheels); the image build and the GPU run are not.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import git
import pytest
import yaml
from helpers import AUTHOR_ENV, REPO_ROOT, assert_one_line_error, load_module, make_project, run_cli

from sglpatch.cache import cache_dir
from sglpatch.cli.image import dry_run_text
from sglpatch.errors import UserError
from sglpatch.ship import image
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
DOCS = REPO_ROOT / "docs" / "deploy.md"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "image.yml"
BENCHMARK = REPO_ROOT / "benchmarks" / "gpu_eagle3.py"
SOURCE_URL = "https://github.com/example/sglang-kimi"


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (image.REPO_ENV, image.SOURCE_ENV, "GITHUB_REPOSITORY", "GITHUB_SERVER_URL")
    }
    return {**env, image.SOURCE_ENV: SOURCE_URL, **extra}


def make_repo(path: Path, patches: dict[str, str] | None = None) -> Path:
    """A project (pin, series, Dockerfile) committed in a real git repository."""
    root = make_project(path, patches or {})
    (root / "docker").mkdir()
    shutil.copy(DOCKERFILE, root / "docker" / "Dockerfile")
    git.Repo.init(root)
    commit_all(root, "project")
    return root


def commit_all(root: Path, message: str) -> str:
    repo = git.Repo(root)
    repo.git.add("-A")
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("-q", "-m", message)
    return repo.head.commit.hexsha


@pytest.fixture(autouse=True)
def _image_env(monkeypatch):
    """In-process plans see the same environment as `_env()` gives the CLI."""
    for name in (image.REPO_ENV, "GITHUB_REPOSITORY", "GITHUB_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(image.SOURCE_ENV, SOURCE_URL)


@pytest.fixture
def project(tmp_path):
    return make_repo(tmp_path / "project")


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory):
    """The real overlay wheel of the pinned release, built by the main job (`sglpatch.ship.build`)."""
    from sglpatch.ship.build import build

    root = make_repo(tmp_path_factory.mktemp("built") / "project")
    result = build(root)
    return root, Path(result.wheel)


# ---------------------------------------------------------------- build context


def dockerfile_context_files(text: str, build_args: dict[str, str]) -> set[str]:
    """The context files the Dockerfile reads: COPY/ADD sources and files under context mounts."""
    files = set()
    for keyword, rest in image.dockerfile_instructions(text):
        tokens = shlex.split(rest)
        if keyword in ("COPY", "ADD") and not any(t.startswith("--from") for t in tokens):
            files |= {image._substitute(t, build_args) for t in tokens[:-1] if not t.startswith("--")}
        if keyword == "RUN":
            for flag in (t for t in tokens if t.startswith("--mount=")):
                opts = dict(kv.partition("=")[::2] for kv in flag[len("--mount=") :].split(","))
                if opts.get("type") == "bind" and "from" not in opts:
                    source_dir, target = opts.get("source", "."), opts["target"].rstrip("/")
                    assert source_dir == ".", "mount a context file by name, or the whole context"
                    for ref in re.findall(re.escape(target) + r"/([^\s\"']+)", rest):
                        files.add(image._substitute(ref, build_args))
                    if re.search(r"--find-links\s+" + re.escape(target) + r"(?:\s|$)", rest):
                        assert "--no-index" in rest, "install from the context only"
                        files.add("*.whl")  # pip picks among every wheel in the context
    return files


def test_context_holds_exactly_what_the_dockerfile_takes(built_wheel, tmp_path):
    root, wheel = built_wheel
    plan = image.plan(root)
    assert wheel.name == plan.wheel_name == f"sglang-{PIN.local_version}-py3-none-any.whl"
    context = tmp_path / "context"
    context.mkdir()
    listing = image.assemble_context(plan, [wheel], context)
    assert listing == list(plan.context_files) == [wheel.name]
    assert sorted(p.name for p in context.rglob("*")) == [wheel.name]
    assert (context / wheel.name).read_bytes() == wheel.read_bytes()
    # the Dockerfile installs the patched version from the context's wheels, and takes nothing else
    assert dockerfile_context_files(DOCKERFILE.read_text(), plan.build_args) == {"*.whl"}
    assert '"sglang==${OCI_VERSION}"' in DOCKERFILE.read_text()
    with zipfile.ZipFile(context / wheel.name) as z:  # what the Dockerfile's check expects
        meta = z.read(f"sglang-{PIN.local_version}.dist-info/METADATA").decode()
    assert f"\nVersion: {plan.build_args['OCI_VERSION']}\n" in meta


def test_context_refuses_a_wheel_the_pin_does_not_name(built_wheel, tmp_path):
    root, wheel = built_wheel
    plan = image.plan(root)
    other = tmp_path / wheel.name.replace("kimi.2", "kimi.9")
    shutil.copy(wheel, other)
    (tmp_path / "ctx").mkdir()
    with pytest.raises(UserError, match="the pin says"):
        image.assemble_context(plan, [other], tmp_path / "ctx")
    with pytest.raises(UserError, match="the pin says"):
        image.assemble_context(plan, [wheel, other], tmp_path / "ctx")
    (tmp_path / "ctx" / "stray").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        image.assemble_context(plan, [wheel], tmp_path / "ctx")


# ---------------------------------------------------------------- dry run, tags, labels


def docs_dry_run_block() -> str:
    text = DOCS.read_text()
    marker = text.index("<!-- image-dry-run")
    block = re.search(r"```\n(.*?)```", text[marker:], re.S)
    return block.group(1).rstrip("\n")


def test_dry_run_prints_what_the_docs_say(project):
    result = run_cli(project, "image", "--dry-run", env=_env())
    assert result.returncode == 0, result.stderr
    plan = image.plan(project)
    out = result.stdout.rstrip("\n")
    for value, placeholder in (
        (SOURCE_URL, "<source-url>"),
        (plan.build_args["OCI_REVISION"], "<git-head>"),
        (plan.build_args["SERIES_SHA256"], "<series-sha256>"),
    ):
        assert out.count(value) == 1
        out = out.replace(value, placeholder)
    assert out == docs_dry_run_block()
    # The printed command is the argument list the build runs, shell-quoted.
    command = result.stdout.split("# command, run from the repository root:\n", 1)[1]
    assert shlex.split(command.replace("\\\n", " ").replace("<context>", "CONTEXT")) == plan.argv("CONTEXT")


def test_dry_run_json_is_the_same_plan(project):
    result = run_cli(
        project, "image", "--dry-run", "--json", "--tag", "latest", "--repo", "ghcr.io/example/sglang-kimi", env=_env()
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dry_run"] is True
    assert data["tags"] == ["ghcr.io/example/sglang-kimi:0.5.9-kimi.2-cu130", "ghcr.io/example/sglang-kimi:latest"]
    assert data["context_files"] == [f"sglang-{PIN.local_version}-py3-none-any.whl"]
    assert data["argv"][:3] == ["docker", "buildx", "build"] and data["argv"][-1] == "<context>"
    assert data["series_tag"] == "0.5.9-kimi.2"


def test_dry_run_needs_no_docker_and_no_wheel(project, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    result = run_cli(project, "image", "--dry-run", env=_env(PATH=str(bin_dir)))
    assert result.returncode == 0, result.stderr
    assert not (project / "dist").exists()


def test_tags_and_labels_follow_the_pin_and_the_series(project):
    before = image.plan(project)
    labels = before.labels()
    assert before.tags == ("sglang-kimi:0.5.9-kimi.2-cu130",)
    assert labels["org.opencontainers.image.base.name"] == "lmsysorg/sglang:v0.5.9-cu130"
    assert labels["org.opencontainers.image.version"] == "0.5.9+kimi.2"
    assert labels["org.opencontainers.image.revision"] == git.Repo(project).head.commit.hexsha
    assert labels["org.opencontainers.image.source"] == SOURCE_URL
    assert labels["sglpatch.upstream.commit"] == PIN.commit
    assert labels["sglpatch.series.version"] == "kimi.2"
    from sglpatch.queue.series import read_series

    assert labels["sglpatch.series.sha256"] == read_series(project).fingerprint()

    pin_file = project / "upstream.toml"
    text = pin_file.read_text()
    text = text.replace('version = "0.5.9"', 'version = "0.5.10"').replace('tag = "v0.5.9"', 'tag = "v0.5.10"')
    text = text.replace(PIN.commit, "1519acf37c23f2189adb93f57ca9cd2db1bebf18")
    text = text.replace("sglang-0.5.9", "sglang-0.5.10").replace("release = 2", "release = 3")
    pin_file.write_text(text)
    (project / "patches" / "series").write_text("# changed series\n")
    head = commit_all(project, "bump")
    after = image.plan(project, extra_tags=["latest", "registry.example/x/y:z"])
    labels = after.labels()
    assert after.tags == ("sglang-kimi:0.5.10-kimi.3-cu130", "sglang-kimi:latest", "registry.example/x/y:z")
    assert after.wheel_name == "sglang-0.5.10+kimi.3-py3-none-any.whl"
    assert labels["org.opencontainers.image.base.name"] == "lmsysorg/sglang:v0.5.10-cu130"
    assert labels["org.opencontainers.image.version"] == "0.5.10+kimi.3"
    assert labels["org.opencontainers.image.revision"] == head
    assert labels["sglpatch.upstream.version"] == "0.5.10"
    assert labels["sglpatch.upstream.commit"] == "1519acf37c23f2189adb93f57ca9cd2db1bebf18"
    assert labels["sglpatch.series.version"] == "kimi.3"
    assert labels["sglpatch.series.sha256"] != before.labels()["sglpatch.series.sha256"]
    assert after.context_files == (after.wheel_name,)

    (project / "patches" / "series").write_text("# uncommitted edit\n")
    assert image.plan(project).build_args["OCI_REVISION"] == head + "-dirty"


def test_labels_are_complete_and_every_build_arg_is_declared(project):
    text = DOCKERFILE.read_text()
    plan = image.plan(project)
    labels = plan.labels()
    for key in (
        "org.opencontainers.image.source",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.version",
        "org.opencontainers.image.base.name",
        "sglpatch.upstream.commit",
        "sglpatch.series.version",
        "sglpatch.series.sha256",
        "sglpatch.flashinfer.version",
    ):
        assert labels.get(key), key
    declared = image.dockerfile_args(text)
    assert set(plan.build_args) <= declared
    no_default = declared - set(image.dockerfile_arg_defaults(text))
    assert no_default == set(plan.build_args), "every ARG without a default is set by the tool"
    assert labels["sglpatch.flashinfer.version"] == image.dockerfile_arg_defaults(text)["FLASHINFER_VERSION"]
    assert (
        image.plan(project, flashinfer_version="0.6.18.post1").labels()["sglpatch.flashinfer.version"] == "0.6.18.post1"
    )
    with pytest.raises(UserError, match="cannot build allreduce fusion"):
        image.plan(project, flashinfer_version="0.6.16")


def test_push_needs_a_registry_and_a_clean_tree(project):
    result = run_cli(project, "image", "--push", "--dry-run", env=_env())
    assert_one_line_error(result, "--push needs a registry")
    (project / "patches" / "series").write_text("# uncommitted\n")
    result = run_cli(project, "image", "--push", "--dry-run", "--repo", "ghcr.io/example/sglang-kimi", env=_env())
    assert_one_line_error(result, "uncommitted changes")
    result = run_cli(project, "image", "--dry-run", "--tag", "not a tag", env=_env())
    assert_one_line_error(result, "not a valid image tag")


def test_source_label_never_carries_credentials():
    assert image._public_url("https://user:secret@github.com/o/r.git") == "https://github.com/o/r"
    assert image._public_url("git@github.com:o/r.git") == "https://github.com/o/r"
    assert image._public_url("ssh://git@example.com:2222/o/r") == "https://example.com/o/r"


# ---------------------------------------------------------------- without Docker


def _bin_with(tmp_path: Path, docker_script: str | None) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    if docker_script is not None:
        (bin_dir / "docker").write_text(docker_script)
        (bin_dir / "docker").chmod(0o755)
    return str(bin_dir)


def test_build_without_docker_client_is_one_clear_error(project, tmp_path):
    result = run_cli(project, "image", env=_env(PATH=_bin_with(tmp_path, None)))
    assert_one_line_error(result, "docker client was not found", "--dry-run")
    assert not (project / "dist").exists(), "nothing is built before Docker is known to work"


def test_build_without_engine_is_one_clear_error(project, tmp_path):
    # A stand-in for the docker CLI whose engine is down (buildx present, `docker info` failing).
    script = (
        '#!/bin/sh\ncase "$1" in\n  buildx) echo "github.com/docker/buildx v0.20.0"; exit 0;;\n'
        '  info) echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1;;\n'
        "esac\nexit 99\n"
    )
    result = run_cli(project, "image", env=_env(PATH=_bin_with(tmp_path, script)))
    assert_one_line_error(result, "no Docker engine is reachable", "Cannot connect to the Docker daemon")


def _client(directory: Path, version: str, buildx: bool) -> Path:
    """A docker CLI stand-in that reports ``version`` and whether its buildx plugin answers."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "docker"
    script.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        f'  --version) echo "Docker version {version}, build abc"; exit 0;;\n'
        f"  buildx) {'echo github.com/docker/buildx v0.20.0; exit 0' if buildx else 'exit 1'};;\n"
        "esac\nexit 99\n"
    )
    script.chmod(0o755)
    return script


def test_builder_prefers_buildx(tmp_path, monkeypatch):
    first = _client(tmp_path / "a", "28.2.2", buildx=True)
    _client(tmp_path / "b", "20.10.24+dfsg1", buildx=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert image.find_builder() == image.Builder(str(first), buildx=True)


def test_builder_falls_back_to_a_client_that_runs_buildkit_itself(tmp_path, monkeypatch, project):
    """Docker >= 23 without buildx refuses BuildKit; Debian's docker.io 20.10 client runs it."""
    plan = image.plan(project)
    _client(tmp_path / "a", "28.2.2", buildx=False)
    debian = _client(tmp_path / "b", "20.10.24+dfsg1", buildx=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    builder = image.find_builder()
    assert builder == image.Builder(str(debian), buildx=False)
    argv = builder.build_argv(plan, "CTX")
    assert argv[:2] == [str(debian), "build"] and "--load" not in argv and argv[-1] == "CTX"
    assert argv[2:] == [a for a in plan.argv("CTX")[3:] if a != "--load"]
    assert builder.env()["DOCKER_BUILDKIT"] == "1"


def test_no_client_that_can_run_buildkit_is_one_clear_error(project, tmp_path):
    bin_dir = Path(_bin_with(tmp_path, None))
    _client(bin_dir, "28.2.2", buildx=False)
    result = run_cli(project, "image", env=_env(PATH=str(bin_dir)))
    assert_one_line_error(result, "buildx plugin is missing", "docker.io")
    assert not (project / "dist").exists()


def test_base_image_and_build_args_reach_the_plan(project):
    result = run_cli(
        project,
        "image",
        "--dry-run",
        "--json",
        "--base-image",
        "registry.example/sglang:v0.5.9-cu130",
        "--build-arg",
        "FLASHINFER_PREBUILD_JIT=0",
        "--build-arg",
        "FLASHINFER_CUBIN_INDEX=",
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["build_args"]["BASE_IMAGE"] == "registry.example/sglang:v0.5.9-cu130"
    assert data["labels"]["org.opencontainers.image.base.name"] == "registry.example/sglang:v0.5.9-cu130"
    argv = data["argv"]
    for pair in ("FLASHINFER_PREBUILD_JIT=0", "FLASHINFER_CUBIN_INDEX="):
        assert argv[argv.index(pair) - 1] == "--build-arg"


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--build-arg", "NOPE=1"), "declares no such ARG"),
        (("--build-arg", "OCI_VERSION=1.0"), "derived from the pin"),
        (("--build-arg", "BASE_IMAGE=x/y:z"), "derived from the pin"),
        (("--build-arg", "FLASHINFER_VERSION=0.6.3"), "--flashinfer-version"),
        (("--build-arg", "JUSTAKEY"), "is not KEY=VALUE"),
        (("--base-image", "lmsysorg/sglang"), "not a base image reference"),
        (("--base-image", "Upper/Case:tag"), "not a base image reference"),
    ],
)
def test_bad_image_options_are_one_clear_error(project, args, needle):
    result = run_cli(project, "image", "--dry-run", *args, env=_env())
    assert_one_line_error(result, needle)


def test_a_second_image_run_in_the_same_checkout_is_refused(project):
    with image.image_lock(project):
        result = run_cli(project, "image", env=_env())
    assert_one_line_error(result, "another `build.py image` is running in this checkout", f"pid {os.getpid()}")
    with image.image_lock(project):  # released with its holder
        pass


def test_workflow_builds_on_tags_and_gates_the_gpu_suite():
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers["push"]["tags"] == ["v*"]
    assert "workflow_dispatch" in triggers
    jobs = data["jobs"]
    assert set(jobs) == {"image", "gpu-smoke"}
    build_steps = "\n".join(s.get("run", "") for s in jobs["image"]["steps"])
    assert "python build.py image --push" in build_steps
    assert "python build.py image --dry-run --json" in build_steps
    # the pushed digest is what the rendered deployment runs, beside the router image
    assert "python build.py deploy --replicas 2 --image-json pushed.json" in build_steps
    assert "router_build_argv" in build_steps
    # a release carries what is inside its image
    assert "gh release upload" in build_steps and "dist/image/*.json" in build_steps
    assert jobs["image"]["permissions"]["contents"] == "write"
    assert jobs["image"]["permissions"]["packages"] == "write"
    gpu = jobs["gpu-smoke"]
    assert gpu["needs"] == "image"
    assert gpu["runs-on"] == ["self-hosted", "gpu", "sm120"]
    assert "vars.SM120_RUNNER" in gpu["if"] and "inputs.gpu_smoke" in gpu["if"]
    assert "pytest -m gpu" in "\n".join(s.get("run", "") for s in gpu["steps"])


def _launch_flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text))


def test_docs_and_benchmark_use_real_launch_server_flags():
    """Every launch_server flag in the docs' docker run and the benchmark exists in the pinned release."""
    tree = source.pristine_tree(PIN.version, PIN)
    known = set(re.findall(r'"(--[a-z0-9-]+)"', (tree / "python/sglang/srt/server_args.py").read_text()))
    docs = DOCS.read_text()
    run_block = re.search(r"```sh\n(docker run -d --name kimi-k25.*?)```", docs, re.S).group(1)
    server_part = run_block.split("sglang-kimi:0.5.9-kimi.2-cu130", 1)[1]
    used = _launch_flags(server_part)
    assert {
        "--tp-size",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--enable-flashinfer-allreduce-fusion",
    } <= used
    assert "EAGLE3" in server_part and "--ipc=host" in run_block and "huggingface" in run_block
    bench = BENCHMARK.read_text()
    server_command = bench[bench.index("def server_command") : bench.index("def wait_healthy")]
    used |= _launch_flags(server_command)
    assert used - known == set()


def test_benchmark_without_gpus_says_so_and_fails(tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--model", "m", "--draft", "d"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "no NVIDIA GPU" in result.stderr and "Traceback" not in result.stderr


def test_the_benchmark_prints_what_it_ran_on_and_where_its_reference_comes_from(monkeypatch):
    bench = load_module("sglpatch_gpu_eagle3", BENCHMARK)
    monkeypatch.delenv(bench.DIGEST_ENV, raising=False)
    text = bench.header_text(bench.run_header("sha256:" + "a" * 64))
    assert text.startswith("run: 20") and "GPUs: " in text and "driver: " in text
    assert f"image: sha256:{'a' * 64}" in text and "SGLang: " in text
    # the twin: without a digest it says it does not know, never leaves the field out
    assert "image: unknown (pass --image-digest)" in bench.header_text(bench.run_header(None))
    table = bench.table([bench.Result("baseline", False, False, [90.0])])
    assert table.endswith(bench.REFERENCE_SOURCE) and "not measured in this repository" in table


# ---------------------------------------------------------------- the FlashInfer pin


def _flashinfer_tree(version: str) -> Path:
    """flashinfer-python's PyPI wheel of ``version``, unpacked under the cache dir."""
    store = cache_dir() / "flashinfer" / version
    tree = store / "tree"
    if not (tree / "flashinfer").is_dir():
        store.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--dest",
                str(store),
                f"flashinfer-python=={version}",
            ],
            check=True,
        )
        wheel = next(store.glob("flashinfer_python-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tree)
    return tree


class FlashInferAPI:
    """Static view of a flashinfer tree: what a dotted name resolves to (def, class or module)."""

    def __init__(self, root: Path):
        self.root = root
        self._names: dict[str, dict | None] = {}

    def module_file(self, mod: str) -> Path | None:
        path = self.root.joinpath(*mod.split("."))
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    def names(self, mod: str, depth: int = 0) -> dict | None:
        if mod in self._names:
            return self._names[mod]
        path = self.module_file(mod)
        if path is None:
            return None
        self._names[mod] = names = {}
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]

        def visit(body):
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.setdefault(node.name, node)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        for n in ast.walk(target):
                            if isinstance(n, ast.Name):
                                names.setdefault(n.id, node)
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        names.setdefault(a.asname or a.name.split(".")[0], ("import", a.name))
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                        base = ".".join(parts + ([node.module] if node.module else []))
                    for a in node.names:
                        if a.name == "*" and depth < 8:
                            names.update(
                                {k: v for k, v in (self.names(base, depth + 1) or {}).items() if k not in names}
                            )
                        elif a.name != "*":
                            names.setdefault(a.asname or a.name, ("from", base, a.name))
                elif isinstance(node, (ast.If, ast.Try)):
                    for part in (
                        node.body,
                        node.orelse,
                        getattr(node, "finalbody", []),
                        *[h.body for h in getattr(node, "handlers", [])],
                    ):
                        visit(part)

        visit(ast.parse(path.read_text()).body)
        return names

    def resolve(self, dotted: str, depth: int = 0):
        """The AST node (or "module"/"external") a dotted flashinfer name stands for, or None."""
        if depth > 10:
            return None
        if self.module_file(dotted):
            return "module"
        mod, _, name = dotted.rpartition(".")
        names = self.names(mod) if mod else None
        if names is None:
            owner = self.resolve(mod, depth + 1) if mod else None
            if isinstance(owner, ast.ClassDef):  # Class.attribute
                return next(
                    (
                        n
                        for n in ast.walk(owner)
                        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                    ),
                    None,
                ) or next((n for n in owner.body if getattr(n, "name", None) == name), None)
            return None
        value = names.get(name)
        if isinstance(value, tuple):
            target = f"{value[1]}.{value[2]}" if value[0] == "from" else value[1]
            return self.resolve(target, depth + 1) if target.startswith("flashinfer") else "external"
        return value


def sglang_flashinfer_uses(tree: Path):
    """(dotted name, file:line, positional count, keywords, has *args/**kw) for SGLang's uses."""
    refs, calls = {}, []
    for path in sorted(tree.rglob("*.py")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SGLang's own invalid escapes are not our finding
                module = ast.parse(path.read_text())
        except SyntaxError:
            continue
        local, aliases = {}, {}
        for node in ast.walk(module):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").split(".")[0] == "flashinfer"
            ):
                for a in node.names:
                    local[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "flashinfer":
                        aliases[a.asname or "flashinfer"] = a.name if a.asname else "flashinfer"
        for node in ast.walk(module):  # `_comm = comm` module aliases
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        aliases[t.id] = aliases[node.value.id]

        def dotted(expr) -> str | None:
            chain = []
            while isinstance(expr, ast.Attribute):
                chain.append(expr.attr)
                expr = expr.value
            if not isinstance(expr, ast.Name):
                return None
            if expr.id in aliases:
                return ".".join([aliases[expr.id], *reversed(chain)]) if chain else None
            if expr.id in local:
                return ".".join([local[expr.id], *reversed(chain)])
            return None

        where = str(path.relative_to(tree))
        for name in local.values():
            refs.setdefault(name, where)
        for node in ast.walk(module):
            if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "ctx", None), ast.Store):
                name = dotted(node)
                if name:
                    refs.setdefault(name, f"{where}:{node.lineno}")
            if isinstance(node, ast.Call):
                name = dotted(node.func)
                if name:
                    starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
                        k.arg is None for k in node.keywords
                    )
                    calls.append(
                        (
                            name,
                            f"{where}:{node.lineno}",
                            len(node.args),
                            [k.arg for k in node.keywords if k.arg],
                            starred,
                        )
                    )
    return refs, calls


def call_fits(node, npos: int, keywords: list[str]) -> bool:
    if isinstance(node, ast.ClassDef):
        init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
        if init is None:
            return True
        node, skip = init, 1
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        skip = 0
    else:
        return True
    a = node.args
    positional = [x.arg for x in a.posonlyargs + a.args][skip:]
    kwonly = [x.arg for x in a.kwonlyargs]
    if npos > len(positional) and not a.vararg:
        return False
    if any(k not in positional + kwonly for k in keywords) and not a.kwarg:
        return False
    required = positional[: len(positional) - len(a.defaults)] if a.defaults else positional
    required += [x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    covered = set(positional[:npos]) | set(keywords)
    return all(r in covered for r in required)


def test_flashinfer_pin_keeps_sglang_api():
    """What SGLang 0.5.9 uses of FlashInfer 0.6.3 is still there in the image's FlashInfer."""
    wheel = source.release_artifact(PIN.version, "wheel", PIN)
    sglang_tree = cache_dir() / "flashinfer" / f"sglang-{PIN.version}"
    if not (sglang_tree / "sglang").is_dir():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(sglang_tree)
    metadata = next(sglang_tree.glob("sglang-*.dist-info/METADATA")).read_text()
    released = re.search(r"^Requires-Dist: flashinfer[_-]python==(\S+)", metadata, re.M | re.I).group(1)
    chosen = image.dockerfile_arg_defaults(DOCKERFILE.read_text())["FLASHINFER_VERSION"]
    old = FlashInferAPI(_flashinfer_tree(released))
    new = FlashInferAPI(_flashinfer_tree(chosen))

    refs, calls = sglang_flashinfer_uses(sglang_tree / "sglang")
    assert len(refs) > 40 and len(calls) > 50, (len(refs), len(calls))
    lost = [
        f"{name} ({where})"
        for name, where in sorted(refs.items())
        if old.resolve(name) is not None and new.resolve(name) is None
    ]
    assert not lost, f"flashinfer {chosen} lacks what SGLang {PIN.version} uses from {released}: {lost}"
    broken = [
        f"{name} at {where}"
        for name, where, npos, kws, starred in calls
        if not starred and call_fits(old.resolve(name), npos, kws) and not call_fits(new.resolve(name), npos, kws)
    ]
    assert not broken, f"calls that fit flashinfer {released} but not {chosen}: {broken}"
    for name in (
        "flashinfer.comm.trtllm_allreduce_fusion",
        "flashinfer.comm.trtllm_create_ipc_workspace_for_all_reduce_fusion",
        "flashinfer.comm.AllReduceFusionPattern.kARResidualRMSNorm",
    ):
        assert name in refs and new.resolve(name) is not None, name

    # ... and it builds the allreduce-fusion module for sm_120 (major 12), which the released one does not.
    def majors(api: FlashInferAPI) -> list[int]:
        gen = api.resolve("flashinfer.jit.comm.gen_trtllm_comm_module")
        kw = next(
            k
            for n in ast.walk(gen)
            if isinstance(n, ast.Call)
            for k in n.keywords
            if k.arg == "supported_major_versions"
        )
        return ast.literal_eval(kw.value)

    assert 12 in majors(new) and 12 not in majors(old)


# ---------------------------------------------------------------- the Dockerfile's FlashInfer check, run


def _dockerfile_flashinfer_check(version: str) -> tuple[str, dict[str, str]]:
    """The Dockerfile's build-time FlashInfer check program and the ENV it runs under."""
    text = DOCKERFILE.read_text()
    program = next(
        tokens[tokens.index("-c") + 1]
        for keyword, rest in image.dockerfile_instructions(text)
        if keyword == "RUN"
        for tokens in [shlex.split(rest)]
        if "gen_trtllm_comm_module(); " in rest
    )
    env = {}
    for keyword, rest in image.dockerfile_instructions(text):
        if keyword == "ENV":
            env.update(item.partition("=")[::2] for item in shlex.split(rest))
    return image._substitute(program, {"FLASHINFER_VERSION": version}), env


def _flashinfer_overlay(runtime, version: str) -> Path:
    """A venv that sees SGLang 0.5.9's runtime (torch 2.9.1, ...) with flashinfer ``version`` on top.

    Only what pip says is missing or too old next to the runtime is installed, into the overlay
    (`--ignore-installed`), so the shared runtime venv is never modified.
    """
    home = cache_dir() / "image" / f"flashinfer-{version}-overlay-sglang-{runtime.sglang_version}"
    python = home / "bin" / "python"
    stamp = home / ".complete"
    if stamp.is_file() and stamp.read_text() == str(runtime.venv):
        return python
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    site = next((home / "lib").glob("python3.*/site-packages"))
    (site / "zz_sglang_runtime.pth").write_text(f"import site; site.addsitedir({str(runtime._site_packages())!r})\n")
    report = home / "report.json"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--report",
            str(report),
            f"flashinfer-python=={version}",
        ],
        check=True,
    )
    wanted = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in json.loads(report.read_text())["install"]]
    assert not any(w.lower().startswith(("torch==", "triton==")) for w in wanted), wanted
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed", *wanted], check=True
    )
    stamp.write_text(str(runtime.venv))
    return python


@pytest.mark.lines("production")  # the Dockerfile's default is production's compatibility pin
def test_dockerfile_flashinfer_check_passes_with_the_pin_and_fails_with_the_released(runtime, tmp_path):
    """Run the Dockerfile's build-time check next to SGLang 0.5.9's real dependencies (CPU only)."""
    chosen = image.dockerfile_arg_defaults(DOCKERFILE.read_text())["FLASHINFER_VERSION"]
    python = _flashinfer_overlay(runtime, chosen)
    program, env = _dockerfile_flashinfer_check(chosen)
    base_env = {**os.environ, **env, "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi")}

    # flashinfer refuses to import next to another version's flashinfer-cubin: the Dockerfile
    # must replace the base image's cubin package (PyPI has none for this version to test with).
    mismatch = subprocess.run([str(python), "-c", program], capture_output=True, text=True, env=base_env)
    assert mismatch.returncode != 0 and "flashinfer-cubin version" in mismatch.stderr, mismatch.stderr[-2000:]

    ok = subprocess.run(
        [str(python), "-c", program],
        capture_output=True,
        text=True,
        env={**base_env, "FLASHINFER_DISABLE_VERSION_CHECK": "1"},
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert f"flashinfer {chosen} trtllm_comm targets sm_120: ok" in ok.stdout

    version = subprocess.run(
        [str(runtime.python), "-c", "import importlib.metadata as m; print(m.version('flashinfer-python'))"],
        capture_output=True,
        text=True,
    )
    released, _ = _dockerfile_flashinfer_check(version.stdout.strip())
    old = subprocess.run([str(runtime.python), "-c", released], capture_output=True, text=True, env=base_env)
    assert old.returncode != 0
    assert "No supported CUDA architectures found for major versions [9, 10]" in old.stderr


# ---------------------------------------------------------------- the latest line


@pytest.mark.lines("latest")
def test_the_flashinfer_the_latest_release_ships_passes_the_dockerfile_check(runtime, tmp_path):
    """The Dockerfile's build-time FlashInfer check, with the line's [image] flashinfer, next to
    that release's real dependencies: the FlashInfer SGLang 0.5.23 requires needs no
    compatibility pin to build allreduce fusion for sm_120."""
    chosen = runtime.pin.image_flashinfer
    installed = subprocess.run(
        [str(runtime.python), "-c", "import importlib.metadata as m; print(m.version('flashinfer-python'))"],
        capture_output=True,
        text=True,
    )
    assert installed.stdout.strip() == chosen, "the runtime pins the FlashInfer the release requires"
    program, env = _dockerfile_flashinfer_check(chosen)
    ok = subprocess.run(
        [str(runtime.python), "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi")},
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert f"flashinfer {chosen} trtllm_comm targets sm_120: ok" in ok.stdout


def test_the_latest_line_builds_the_same_dockerfile_on_its_own_base_and_flashinfer():
    """`--line latest image`: upstream's cu130 image of that release, the FlashInfer that release
    requires (no compatibility pin), tags and labels naming the line's upstream version."""
    from sglpatch.queue.line import find_line
    from sglpatch.upstream.source import release_artifact

    root = find_line(REPO_ROOT, "latest").root
    pin = read_pin(root)
    plan = image.plan(root)
    assert plan.repo_root == REPO_ROOT
    assert plan.build_args["BASE_IMAGE"] == f"lmsysorg/sglang:v{pin.version}-cu130"
    assert plan.image.endswith(f":{pin.version}-kimi.{pin.series_release}-cu130")
    assert plan.wheel_name.startswith(f"sglang-{pin.local_version}-")
    # one overlay per pinned CPython wheel in the context; pip in the image picks its Python's
    assert plan.context_files == tuple(f"sglang-{pin.local_version}-{a.filename.split('-', 2)[2]}" for a in pin.wheels)
    assert {n.split("-")[2] for n in plan.context_files} >= {"cp311", "cp312"}
    labels = plan.labels()
    assert labels["sglpatch.upstream.version"] == pin.version
    assert labels["org.opencontainers.image.version"] == pin.local_version
    # FlashInfer as the release ships it: the pin's entry is the upstream wheel's requirement
    with zipfile.ZipFile(release_artifact(pin.version, "wheel", pin)) as whl:
        meta = whl.read(f"sglang-{pin.version}.dist-info/METADATA").decode()
    required = re.search(r"^Requires-Dist: flashinfer[_-]python(?:\[[^\]]*\])?==([^\s;]+)", meta, re.M).group(1)
    assert pin.image_flashinfer == required == plan.all_build_args()["FLASHINFER_VERSION"]
    assert labels["sglpatch.flashinfer.version"] == required
    assert "--build-arg" in plan.argv() and f"FLASHINFER_VERSION={required}" in plan.argv()
    text = dry_run_text(plan)
    assert f"from lines/latest/dist/{plan.wheel_name}, built by `python build.py --line latest`" in text
