"""What one Compose host gives the replicas (``sglpatch.ship.deploy_host``): the entrypoint that
passes the API key from the container's environment to the image's own entrypoint, run for real
by /bin/sh; the image entrypoints read from the Dockerfiles; the GPU inventory and its groups; the
published address. Fast, no engine; each check with a negative twin. The CLI around them:
tests/ship/test_deploy.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from sglpatch.errors import UserError
from sglpatch.ship import deploy_host

# An image entrypoint of the product's shape (sh -c SCRIPT NAME): prints the arguments it is given.
ECHO_ENTRYPOINT = ["/bin/sh", "-c", 'for a in "$@"; do echo "[$a]"; done', "sglang.launch_server"]


def _run_as_compose_would(entrypoint: list[str], command: list[str], env: dict[str, str]):
    """What the container runs: Compose's ``$$`` unescaped, the entrypoint then the command."""
    argv = [part.replace("$$", "$") for part in entrypoint] + command
    return subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env}, timeout=30)


def test_the_wrapped_entrypoint_appends_the_key_from_the_environment():
    key = "k3y with spaces and $HOME"  # passed as one argument, never expanded again
    out = _run_as_compose_would(
        deploy_host.with_key(ECHO_ENTRYPOINT), ["--model-path", "/models/x y"], {"ROUTER_API_KEY": key}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[--model-path]", "[/models/x y]", "[--api-key]", f"[{key}]"]
    # negative twins: unset or empty, the container stops and says why instead of serving unkeyed
    for env in ({}, {"ROUTER_API_KEY": ""}):
        out = _run_as_compose_would(deploy_host.with_key(ECHO_ENTRYPOINT), ["--model-path", "/m"], env)
        assert out.returncode != 0 and out.stdout == "" and "ROUTER_API_KEY: is not set" in out.stderr


def test_every_dollar_is_escaped_for_compose():
    wrapped = deploy_host.with_key(deploy_host.image_entrypoint(REPO_ROOT / "docker" / "Dockerfile"))
    assert all("$" not in part.replace("$$", "") for part in wrapped)
    assert wrapped[3:] == [
        p.replace("$", "$$") for p in deploy_host.image_entrypoint(REPO_ROOT / "docker" / "Dockerfile")
    ]


def test_the_image_entrypoints_are_read_from_their_dockerfiles(tmp_path):
    product = deploy_host.image_entrypoint(REPO_ROOT / "docker" / "Dockerfile")
    assert product[:2] == ["/bin/sh", "-c"] and "sglang.launch_server" in product[2]
    assert deploy_host.image_entrypoint(REPO_ROOT / "docker" / "router" / "Dockerfile") == [
        "python3",
        "-m",
        "sglang_router.launch_router",
    ]
    # negative twins: the shell form (nothing to wrap exactly) and no ENTRYPOINT are refused
    for text in ("FROM x\nENTRYPOINT python3 -m thing\n", 'FROM x\nCMD ["a"]\n'):
        (tmp_path / "Dockerfile").write_text(text)
        with pytest.raises(UserError, match="no exec-form ENTRYPOINT"):
            deploy_host.image_entrypoint(tmp_path / "Dockerfile")


def test_gpu_groups_are_disjoint_and_run_out():
    host = deploy_host.host(gpus="20")
    groups = deploy_host.gpu_groups(host, 8, 2)
    assert groups == [tuple(str(i) for i in range(8)), tuple(str(i) for i in range(8, 16))]
    with pytest.raises(UserError, match=r"--replicas 3 needs 24 GPUs .* which has 20 \(--gpus 20\)"):
        deploy_host.gpu_groups(host, 8, 3)
    default = deploy_host.host()
    assert default.gpu_ids == tuple(str(i) for i in range(8)) and default.gpu_source == "the default, 8"
    assert deploy_host.host(gpu_ids="GPU-1a,MIG-2b/1/0").gpu_ids == ("GPU-1a", "MIG-2b/1/0")
    for kwargs in ({"gpus": "-1"}, {"gpus": "1025"}, {"gpu_ids": "0, 0"}, {"gpu_ids": "GPU 1"}):
        with pytest.raises(UserError):
            deploy_host.host(**kwargs)


def test_addresses(tmp_path):
    assert deploy_host.host().bind == "127.0.0.1"
    assert [deploy_host.is_loopback(a) for a in ("127.0.0.1", "127.3.2.1", "::1", "0.0.0.0", "::", "10.0.0.1")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert deploy_host.published(deploy_host.bind_address("[::1]")) == "[::1]"
    assert deploy_host.published(deploy_host.bind_address("0.0.0.0")) == "0.0.0.0"
    with pytest.raises(UserError, match="without an API key"):
        deploy_host.host(bind="10.0.0.1")
    key = tmp_path / "key.env"
    key.write_text("ROUTER_API_KEY=" + "0" * 64 + "\n")
    key.chmod(0o640)
    assert deploy_host.host(bind="10.0.0.1", key_file=str(key)).key_file == Path(key).absolute()
