"""`docker pull` for real: `python build.py image --push` sends the product image to a real registry
(Debian's docker-registry on 127.0.0.1), the image is removed from the engine, pulled back by
digest and by tag, and serves EAGLE-3 from what was pulled.

The registry is seeded with the stand-in base first (tests/registry_server.py `seed`, pigz on both
cores): dockerd's own push compresses with one core, 15+ minutes for a base of CUDA wheels. The
push under test then mounts the base layers and compresses our own layers itself, as a production
push onto a registry that already holds the base does. The rules themselves (release tags never
move, floating tags do, a full disk, a registry that is down) are checked in seconds on tiny images
in tests/test_registry.py.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request

import git
import pytest

from registry_server import registry, seed
from test_image_build import (PIN, TEST_BUILD_ARGS, _logs, containers, copy_project,
                              image_cli, run_server, scripts, wait_for)

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.lines("production")]

NAME = "sglang-kimi"


@pytest.fixture(scope="module")
def local_registry(docker_engine, standin_base, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("registry")
    with registry(workdir) as served:
        seed(docker_engine, served, standin_base, "sglpatch-test/standin", "base", workdir,
             progress=lambda m: sys.__stderr__.write(f"\n[registry] {m}\n"))
        yield served


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("registry-image") / "project")


def push(project, engine, served, *extra: str):
    return image_cli(project, engine, "--repo", f"{served.host}/{NAME}", "--push", "--tag", "latest",
                     *extra, *TEST_BUILD_ARGS, "--json")


@pytest.fixture(scope="module")
def pushed(project, docker_engine, standin_base, local_registry):
    start = time.monotonic()
    result = push(project, docker_engine, local_registry, "--base-image", standin_base)
    assert result.returncode == 0, result.stderr[-8000:]
    sys.__stderr__.write(f"\n[registry] product image built and pushed in {time.monotonic() - start:.0f}s\n")
    return json.loads(result.stdout)


def test_the_push_names_the_digest_the_registry_serves(pushed, local_registry):
    release = f"{PIN.version}-kimi.{PIN.series_release}-cu130"
    assert {(p["tag"].rpartition(":")[2], p["kind"], p["status"]) for p in pushed["pushed"]} == {
        (release, "release", "pushed"), ("latest", "floating", "pushed")}
    for tag in (release, "latest"):
        digest, manifest = local_registry.manifest(NAME, tag)
        assert digest == pushed["digest"] and manifest["config"]["digest"] == pushed["image_id"]
    assert pushed["pull"] == f"{local_registry.host}/{NAME}@{pushed['digest']}"


@pytest.fixture(scope="module")
def pulled(pushed, docker_engine):
    """The image removed from the engine, then pulled back by digest (and by tag)."""
    docker_engine.docker("rmi", "--force", pushed["image_id"])
    assert docker_engine.docker("image", "inspect", pushed["image_id"], check=False).returncode != 0
    docker_engine.docker("pull", pushed["pull"], timeout=1800)
    docker_engine.docker("pull", pushed["image"], timeout=1800)
    return pushed["pull"]


def test_the_pulled_image_is_the_built_one_with_its_labels(pulled, pushed, docker_engine):
    for ref in (pulled, pushed["image"]):
        found = json.loads(docker_engine.docker("image", "inspect", ref).stdout)[0]
        assert found["Id"] == pushed["image_id"]
        assert found["Config"]["Labels"] == {**found["Config"]["Labels"], **pushed["labels"]}


def test_the_image_pulled_by_digest_serves_eagle3(pulled, docker_engine, always0_pair):
    target, draft = always0_pair
    cid = run_server(docker_engine, pulled, target, draft)
    try:
        state = wait_for(docker_engine, cid, lambda s: not s["Running"] or s["Health"]["Status"] == "healthy",
                         timeout=900)
        assert state["Running"], f"the server exited ({state['ExitCode']}):\n{_logs(docker_engine, cid)[-8000:]}"
        assert state["Health"]["Status"] == "healthy"
        port = docker_engine.docker("port", cid, "30000/tcp").stdout.split()[0].rsplit(":", 1)[1]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/generate",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"text": scripts.PROMPTS[0],
                                                          "sampling_params": scripts.GREEDY}).encode())
        with urllib.request.urlopen(request, timeout=600) as resp:
            meta = json.loads(resp.read())["meta_info"]
        assert meta["spec_accept_length"] > 1, meta
    finally:
        docker_engine.docker("rm", "--force", cid, check=False)
        assert cid not in containers(docker_engine)


def test_pushing_the_same_commit_again_changes_nothing(pulled, project, docker_engine, standin_base,
                                                       local_registry, pushed):
    result = push(project, docker_engine, local_registry, "--base-image", standin_base)
    assert result.returncode == 0, result.stderr[-4000:]
    again = json.loads(result.stdout)
    assert again["digest"] == pushed["digest"]
    assert {p["kind"]: p["status"] for p in again["pushed"]} == {"release": "unchanged", "floating": "pushed"}


def test_a_new_commit_under_the_same_release_tag_is_refused(pulled, project, docker_engine, standin_base,
                                                            local_registry, pushed):
    """Another revision label is another image: its release tag would move, so nothing is pushed."""
    before = {tag: local_registry.manifest(NAME, tag)[0] for tag in local_registry.tags(NAME)}
    repo = git.Repo(project)
    repo.git.commit("--allow-empty", "-qm", "a change after the release")
    try:
        result = push(project, docker_engine, local_registry, "--base-image", standin_base)
    finally:
        repo.git.reset("--hard", "-q", "HEAD~1")
    assert result.returncode == 2, result.stderr[-4000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "release tags never move" in last and "bump [series] release" in last and "Traceback" not in result.stderr
    assert {tag: local_registry.manifest(NAME, tag)[0] for tag in local_registry.tags(NAME)} == before
