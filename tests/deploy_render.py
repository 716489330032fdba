"""The deploy files `python build.py deploy` renders, read back: for the tests of the command
(tests/ship/test_deploy.py) and of the checks on its Kubernetes manifests (tests/ship/test_manifests.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import REPO_ROOT, run_cli


def render(tmp_path, *args: str, line: str = "production"):
    out = tmp_path / f"out-{line}"
    result = run_cli(
        REPO_ROOT, *(("--line", line) if line != "production" else ()), "deploy", "--out", str(out), "--json", *args
    )
    assert result.returncode == 0, result.stderr
    return out, json.loads(result.stdout)


def load_all(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kind(docs, k, name=None):
    return [d for d in docs if d["kind"] == k and (name is None or d["metadata"]["name"] == name)]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render(tmp_path_factory.mktemp("deploy"), "--replicas", "3", "--gpus", "24")


@pytest.fixture(scope="module")
def single(rendered):
    return load_all(rendered[0] / "k8s" / "single.rendered.yaml")


@pytest.fixture(scope="module")
def multinode(rendered):
    return load_all(rendered[0] / "k8s" / "multinode.rendered.yaml")


def workers(docs):
    return kind(docs, "Deployment", "sglang-kimi")[0]["spec"]["template"]["spec"]


def leader(docs):
    return kind(docs, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def gpu_groups(gpu_doc):
    """Each replica's ``device_ids`` in a rendered gpu.yaml."""
    return {
        name: device.get("device_ids")
        for name, service in gpu_doc["services"].items()
        for device in service["deploy"]["resources"]["reservations"]["devices"]
    }


def shared_gpus(gpu_doc):
    """What lets two replicas on one host share a GPU: a ``count`` (Docker takes the first N GPUs
    for every replica that asks) or an id in two replicas' ``device_ids``."""
    problems, owner = [], {}
    for name, service in gpu_doc["services"].items():
        for device in service["deploy"]["resources"]["reservations"]["devices"]:
            if "count" in device or not device.get("device_ids"):
                problems.append(f"{name}: a count, not device_ids")
            for gpu in device.get("device_ids") or ():
                if gpu in owner:
                    problems.append(f"GPU {gpu}: {owner[gpu]} and {name}")
                owner[gpu] = name
    return problems
