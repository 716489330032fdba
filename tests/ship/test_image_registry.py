"""`docker pull` for real, on both lines: `python build.py [--line L] image --push` sends the line's
image to a real registry (Debian's docker-registry on 127.0.0.1), the image is removed from the
engine, pulled back by digest and by tag, and serves EAGLE-3 from what was pulled.

The registry is seeded with the stand-in base first, in the background from when the base is built
(`seeded_registry` in tests/conftest.py; tests/registry_server.py `seed`, pigz on both cores):
dockerd's own push compresses with one core, 15+ minutes for a base of CUDA wheels. The
push under test then mounts the base layers and compresses our own layers itself, as a production
push onto a registry that already holds the base does. The rules themselves (release tags never
move, floating tags do, a full disk, a registry that is down) are checked in seconds on tiny images
in tests/test_registry.py.
"""

from __future__ import annotations

import json
import sys
import time

import git
import pytest
from registry_server import forget_images
from test_image_build import TEST_BUILD_ARGS, copy_project, image_cli, serve

# Both lines: each pushes its own image onto its own stand-in base.
pytestmark = [pytest.mark.image, pytest.mark.slow]

NAME = "sglang-kimi"


@pytest.fixture(scope="module", autouse=True)
def untagged_afterwards(docker_engine, seeded_registry):
    yield
    forget_images(docker_engine, seeded_registry.host)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("registry-image") / "project")


def push(project, engine, served, runtime, *extra: str):
    return image_cli(
        project,
        engine,
        "--line",
        runtime.line.name,
        "--repo",
        f"{served.host}/{NAME}",
        "--push",
        "--tag",
        "latest",
        *extra,
        *TEST_BUILD_ARGS,
        "--json",
    )


@pytest.fixture(scope="module")
def pushed(project, docker_engine, standin_base, seeded_registry, runtime):
    start = time.monotonic()
    result = push(project, docker_engine, seeded_registry, runtime, "--base-image", standin_base)
    assert result.returncode == 0, result.stderr[-8000:]
    sys.__stderr__.write(
        f"\n[registry] {runtime.line.name} image built and pushed in {time.monotonic() - start:.0f}s\n"
    )
    return json.loads(result.stdout)


def test_the_push_names_the_digest_the_registry_serves(pushed, seeded_registry, runtime):
    release = f"{runtime.pin.version}-kimi.{runtime.pin.series_release}-cu130"
    assert {(p["tag"].rpartition(":")[2], p["kind"], p["status"]) for p in pushed["pushed"]} == {
        (release, "release", "pushed"),
        ("latest", "floating", "pushed"),
    }
    for tag in (release, "latest"):
        digest, manifest = seeded_registry.manifest(NAME, tag)
        assert digest == pushed["digest"] and manifest["config"]["digest"] == pushed["image_id"]
    assert pushed["pull"] == f"{seeded_registry.host}/{NAME}@{pushed['digest']}"


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
    state, out, _ = serve(docker_engine, pulled, always0_pair)
    assert state["Health"]["Status"] == "healthy"
    assert out["meta_info"]["spec_accept_length"] > 1, out["meta_info"]


def test_pushing_the_same_commit_again_changes_nothing(
    pulled, project, docker_engine, standin_base, seeded_registry, pushed, runtime
):
    result = push(project, docker_engine, seeded_registry, runtime, "--base-image", standin_base)
    assert result.returncode == 0, result.stderr[-4000:]
    again = json.loads(result.stdout)
    assert again["digest"] == pushed["digest"]
    assert {p["kind"]: p["status"] for p in again["pushed"]} == {"release": "unchanged", "floating": "pushed"}


def test_a_new_commit_under_the_same_release_tag_is_refused(
    pulled, project, docker_engine, standin_base, seeded_registry, pushed, runtime
):
    """Another revision label is another image: its release tag would move, so nothing is pushed."""
    before = {tag: seeded_registry.manifest(NAME, tag)[0] for tag in seeded_registry.tags(NAME)}
    repo = git.Repo(project)
    repo.git.commit("--allow-empty", "-qm", "a change after the release")
    try:
        result = push(project, docker_engine, seeded_registry, runtime, "--base-image", standin_base)
    finally:
        repo.git.reset("--hard", "-q", "HEAD~1")
    assert result.returncode == 2, result.stderr[-4000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "release tags never move" in last and "bump [series] release" in last and "Traceback" not in result.stderr
    assert {tag: seeded_registry.manifest(NAME, tag)[0] for tag in seeded_registry.tags(NAME)} == before
