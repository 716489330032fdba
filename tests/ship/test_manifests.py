"""What the rendered Kubernetes manifests must hold before anyone applies them
(``sglpatch.ship.manifests``): the OpenAPI schema of a pinned Kubernetes release and the policy of
what a replica needs, each rule with a negative twin (the manifests without it are refused)."""

from __future__ import annotations

import copy

import pytest
from deploy_render import kind, leader, multinode, rendered, single, workers  # noqa: F401  (fixtures)

from sglpatch.ship import manifests


def test_rendered_manifests_pass_the_schema_and_the_policy(single, multinode):
    for docs in (single, multinode):
        assert manifests.schema_problems(docs) == []
        assert manifests.policy_problems(docs) == []


def _drop(key):
    return lambda docs: workers(docs)["containers"][0].pop(key)


def _without(k, name=None):
    return lambda docs: docs.remove(kind(docs, k, name)[0])


BROKEN = {
    "startupProbe": _drop("startupProbe"),
    "readinessProbe": _drop("readinessProbe"),
    "livenessProbe": _drop("livenessProbe"),
    "startupProbe allows": lambda d: workers(d)["containers"][0]["startupProbe"].update(failureThreshold=60),
    "resources.limits['nvidia.com/gpu'] is '4'": lambda d: workers(d)["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpu": 4}
    ),
    "resources.requests['nvidia.com/gpu'] is ''": lambda d: workers(d)["containers"][0]["resources"].pop("requests"),
    "/dev/shm": lambda d: workers(d)["volumes"][-1].update(emptyDir={}),
    "one replica at a time": lambda d: kind(d, "Deployment", "sglang-kimi")[0]["spec"]["strategy"][
        "rollingUpdate"
    ].update(maxUnavailable=2),
    "PodDisruptionBudget": _without("PodDisruptionBudget"),
    "Service in front of the router": _without("Service", "sglang-router"),
    "no RoleBinding": _without("RoleBinding"),
    "no RoleBinding to a Role": lambda d: kind(d, "Role")[0]["rules"][0].update(verbs=["get", "list"]),
    "no serviceAccountName": lambda d: kind(d, "Deployment", "sglang-router")[0]["spec"]["template"]["spec"].pop(
        "serviceAccountName"
    ),
    "no --service-discovery": lambda d: kind(d, "Deployment", "sglang-router")[0]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"].remove("--service-discovery"),
    "no workload of replicas": _without("Deployment", "sglang-kimi"),
}


@pytest.mark.parametrize("needle", sorted(BROKEN))
def test_the_policy_refuses_manifests_without(single, needle):
    docs = copy.deepcopy(single)
    BROKEN[needle](docs)
    problems = manifests.policy_problems(docs)
    assert any(needle in p for p in problems), problems


MULTINODE_BROKEN = {
    "leader: no startupProbe": lambda d: leader(d)["containers"][0].pop("startupProbe"),
    "worker: resources.limits['nvidia.com/gpu']": lambda d: kind(d, "LeaderWorkerSet")[0]["spec"][
        "leaderWorkerTemplate"
    ]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"].clear(),
    "--selector lacks ['leaderworkerset.sigs.k8s.io/worker-index=0']": lambda d: kind(d, "Deployment", "sglang-router")[
        0
    ]["spec"]["template"]["spec"]["containers"][0]["args"].remove(manifests.LEADER_LABEL),
}


@pytest.mark.parametrize("needle", sorted(MULTINODE_BROKEN))
def test_the_policy_refuses_a_multinode_replica_without(multinode, needle):
    docs = copy.deepcopy(multinode)
    MULTINODE_BROKEN[needle](docs)
    assert any(needle in p for p in manifests.policy_problems(docs)), manifests.policy_problems(docs)


def test_the_schema_refuses_an_unknown_field_and_a_wrong_type(single, multinode):
    docs = copy.deepcopy(single)
    probe = workers(docs)["containers"][0]
    probe["readinesProbe"] = probe.pop("readinessProbe")
    assert any("readinesProbe" in p for p in manifests.schema_problems(docs))
    docs = copy.deepcopy(multinode)
    leader(docs)["containers"][0]["ports"][0]["containerPort"] = "thirty-thousand"
    assert any("LeaderWorkerSet/sglang-kimi" in p for p in manifests.schema_problems(docs))
