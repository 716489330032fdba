"""Pushing to a real registry (sglpatch/ship/registry.py): Debian's docker-registry on 127.0.0.1 and the
real Docker engine, with tiny images made here, so every rule is checked in seconds. The product
image's own push, pull by digest and EAGLE-3 serving are in tests/test_image_registry.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from functools import partial
from pathlib import Path

import pytest
from helpers import REPO_ROOT, assert_one_line_error, run_cli
from registry_server import forget_images, free_port, registry

from sglpatch.errors import UserError
from sglpatch.ship import image
from sglpatch.ship.registry import failure, is_release_tag, local_image_id, publish, remote_image

pytestmark = [pytest.mark.image]

SERIES = "0.5.9-kimi.2"
NAME = "sglang-kimi"


@pytest.fixture(scope="module")
def local_registry(docker_engine, tmp_path_factory):
    with registry(tmp_path_factory.mktemp("registry")) as served:
        yield served
        forget_images(docker_engine, served.host)


def tiny_image(engine, ref: str, content: bytes) -> str:
    """An image of one file, imported from a tarball: its ID follows ``content``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("payload")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    subprocess.run(
        [engine.builder.client, "import", "-", ref],
        input=data.getvalue(),
        check=True,
        capture_output=True,
        env=engine.env(),
    )
    return engine.docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


def push(engine, tags: list[str], series: str = SERIES) -> dict:
    stream = partial(image.stream, cwd=Path.cwd())
    image_id = local_image_id(engine.builder.client, tags[0], engine.env())
    return publish(engine.builder.client, tags, image_id, series, engine.env(), lambda argv, env: stream(argv, env=env))


def tags_of(served, repo: str, release: str) -> tuple[str, str]:
    return f"{served.host}/{repo}:{release}", f"{served.host}/{repo}:latest"


def test_release_and_floating_tags_are_told_apart():
    assert is_release_tag(f"r/x:{SERIES}-cu130", SERIES) and is_release_tag(f"r/x:{SERIES}", SERIES)
    assert not is_release_tag("r/x:latest", SERIES) and not is_release_tag("r/x:0.5.9-cu130", SERIES)
    assert not is_release_tag(f"r/x:{SERIES}0-cu130", SERIES)  # kimi.20 is another release


# what docker prints, word for word, for a registry on HOST (the ports below hold 401, 403 and 507)
DOWN = 'Get "http://HOST/v2/": dial tcp HOST: connect: connection refused'
NO_CREDENTIALS = 'Get "http://HOST/v2/REPO/manifests/TAG": no basic auth credentials'
PUSH_DOWN = "The push refers to repository [HOST/REPO]\n" + DOWN
# the registry's token server (another port, with 403 in it) is down; its URL names the repository
TOKEN_DOWN = (
    'Get "http://127.0.0.1:4031/token?scope=repository:REPO:pull,push&service=registry": '
    "dial tcp 127.0.0.1:4031: connect: connection refused"
)
FULL = "REPO blob upload unknown: received unexpected HTTP status: 507 Insufficient Storage"


def said(template: str, ref: str) -> str:
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    return template.replace("HOST", host).replace("REPO", repo).replace("TAG", tag)


@pytest.mark.parametrize("port", [35071, 54010, 14031, 5070, 4403])
def test_a_port_is_no_status_code(port):
    """A port that holds 401, 403 or 507 is still a registry that is down, or one that wants
    credentials; the twin: the same words on port 5000 say the same."""
    for host in (f"127.0.0.1:{port}", "127.0.0.1:5000"):
        ref = f"{host}/{NAME}:{SERIES}-cu130"
        assert "is not reachable" in str(failure(ref, said(DOWN, ref), "reading"))
        refused = str(failure(ref, said(NO_CREDENTIALS, ref), "reading"))
        assert "refused reading" in refused and f"docker login {host}" in refused


@pytest.mark.parametrize(
    "repo", ["denied", "forbidden/unauthorized", "status-403", "quota/disk-quota-exceeded-507", "credentials"]
)
def test_a_repository_name_is_not_what_docker_said(repo):
    """A registry that is down is down whatever the repository is called; the twins: docker's own
    words for a refusal and a full disk are still read as those."""
    ref = f"127.0.0.1:5000/{repo}:{SERIES}-cu130"
    assert "is not reachable" in str(failure(ref, said(PUSH_DOWN, ref), "pushing"))
    assert "is not reachable" in str(failure(ref, said(TOKEN_DOWN, ref), "pushing"))
    assert "refused pushing" in str(failure(ref, said(NO_CREDENTIALS, ref), "pushing"))
    assert "is out of space" in str(failure(ref, said(FULL, ref), "pushing"))


def test_a_push_reports_the_digest_the_registry_serves_for_every_tag(docker_engine, local_registry):
    release, latest = tags_of(local_registry, "digest/" + NAME, f"{SERIES}-cu130")
    image_id = tiny_image(docker_engine, release, b"one")
    docker_engine.docker("tag", release, latest)
    report = push(docker_engine, [release, latest])
    assert [(p["tag"], p["kind"], p["status"]) for p in report["pushed"]] == [
        (release, "release", "pushed"),
        (latest, "floating", "pushed"),
    ]
    for tag in ("latest", f"{SERIES}-cu130"):
        digest, manifest = local_registry.manifest("digest/" + NAME, tag)
        assert digest == report["digest"] and manifest["config"]["digest"] == image_id == report["image_id"]
    assert report["pull"] == f"{local_registry.host}/digest/{NAME}@{report['digest']}"


def test_a_release_tag_never_moves_and_the_same_image_again_is_a_no_op(docker_engine, local_registry):
    repo = "immutable/" + NAME
    release, latest = tags_of(local_registry, repo, f"{SERIES}-cu130")
    tiny_image(docker_engine, release, b"first")
    docker_engine.docker("tag", release, latest)
    first = push(docker_engine, [release, latest])
    before = {t: local_registry.manifest(repo, t)[0] for t in local_registry.tags(repo)}

    again = push(docker_engine, [release, latest])  # the twin: the same image is accepted
    assert [p["status"] for p in again["pushed"]] == ["unchanged", "pushed"]
    assert again["digest"] == first["digest"]

    tiny_image(docker_engine, release, b"second")  # another image under the same release tag
    docker_engine.docker("tag", release, latest)
    with pytest.raises(UserError, match="release tags never move") as refused:
        push(docker_engine, [release, latest])
    assert "bump [series] release" in str(refused.value)
    after = {t: local_registry.manifest(repo, t)[0] for t in local_registry.tags(repo)}
    assert after == before  # refused before anything was pushed: latest did not move either

    newer = f"{local_registry.host}/{repo}:0.5.9-kimi.3-cu130"  # a new release: floating tags move
    docker_engine.docker("tag", release, newer)
    moved = push(docker_engine, [newer, latest], series="0.5.9-kimi.3")
    assert local_registry.manifest(repo, "latest")[0] == moved["digest"] != first["digest"]
    assert local_registry.manifest(repo, f"{SERIES}-cu130")[0] == first["digest"]


def test_a_registry_that_is_down_is_one_error_naming_it(docker_engine):
    ref = f"127.0.0.1:{free_port()}/{NAME}:{SERIES}-cu130"
    with pytest.raises(UserError, match="is not reachable") as down:
        remote_image(docker_engine.builder.client, ref, docker_engine.env())
    assert "\n" not in str(down.value) and ref.split("/")[0] in str(down.value)


def test_image_push_to_a_registry_that_is_down_fails_before_building(docker_engine, tmp_path):
    """One line and exit 2 before the wheel or the image is built (no build log, no dist/)."""
    project = tmp_path / "project"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(project)], check=True)
    repo = f"127.0.0.1:{free_port()}/{NAME}"
    result = run_cli(project, "image", "--push", "--repo", repo, env=docker_engine.env())
    assert_one_line_error(result, "is not reachable", repo.split("/")[0])
    assert not (project / "dist").exists() and "docker build" not in result.stderr


def test_a_full_registry_disk_is_one_error_and_leaves_no_tag(docker_engine, tmp_path):
    with registry(tmp_path / "full", disk_mb=1) as small:
        release = f"{small.host}/{NAME}:{SERIES}-cu130"
        tiny_image(docker_engine, release, os.urandom(4 << 20))  # 4 MB that do not compress
        with pytest.raises(UserError, match="failed while pushing|out of space") as full:
            push(docker_engine, [release])
        assert "storage" in str(full.value) and "\n" not in str(full.value)
        assert small.tags(NAME) == []  # nothing half-pushed is named as a release
        forget_images(docker_engine, small.host)


def test_a_registry_that_wants_credentials_is_one_error_naming_docker_login(docker_engine, tmp_path):
    with registry(tmp_path / "auth", users={"maintainer": "s3cret"}) as guarded:
        release = f"{guarded.host}/{NAME}:{SERIES}-cu130"
        tiny_image(docker_engine, release, b"guarded")
        with pytest.raises(UserError, match="refused") as refused:
            push(docker_engine, [release])
        assert f"docker login {guarded.host}" in str(refused.value) and "\n" not in str(refused.value)
        forget_images(docker_engine, guarded.host)
