"""What the rendered Kubernetes manifests must hold before anyone applies them
(``sglpatch.ship.manifests``): the OpenAPI schema of a pinned Kubernetes release and the policy of
what a replica needs, each rule with a negative twin (the manifests without it are refused)."""

from __future__ import annotations

import copy

import pytest
from deploy_render import kind, leader, multinode, rendered, single, workers  # noqa: F401  (fixtures)
from helpers import REPO_ROOT

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
    # the API key: required by the router and the replicas, only ever from a Secret, the same one
    "Deployment/sglang-router container router: no --api-key": lambda d: _drop_key(_router(d)),
    "Deployment/sglang-kimi container sglang: no --api-key": lambda d: _drop_key(workers(d)["containers"][0]),
    "router: --api-key is not $(VAR) with VAR from a Secret": lambda d: _literal_env(_router(d)),
    "sglang: --api-key is not $(VAR)": lambda d: _literal_key(workers(d)["containers"][0]),
    "from different Secrets": lambda d: _env(workers(d)["containers"][0], "ROUTER_API_KEY")["valueFrom"][
        "secretKeyRef"
    ].update(key="other-key"),
    # the NetworkPolicy: the replicas isolated, their serving port the router's (and the scraper's)
    "no NetworkPolicy isolates the replicas": _without("NetworkPolicy"),
    "ingress[2] lets pods other than the router": lambda d: _ingress(d).append({"ports": [{"port": 30000}]}),
    "ingress[0] lets pods other than the router": lambda d: _ingress(d)[0]["from"][0].update(namespaceSelector={}),
    "ingress[1] lets pods other than the router": lambda d: _ingress(d)[1]["from"].append(
        {"ipBlock": {"cidr": "0.0.0.0/0"}}
    ),
    "no NetworkPolicy lets the router": lambda d: _ingress(d)[0].update(ports=[{"port": 30001}]),
}


def _router(docs):
    return kind(docs, "Deployment", "sglang-router")[0]["spec"]["template"]["spec"]["containers"][0]


def _env(container, name):
    return next(e for e in container["env"] if e["name"] == name)


def _literal_env(container):
    env = _env(container, "ROUTER_API_KEY")
    env.pop("valueFrom")
    env["value"] = "hunter2hunter2hunter2"


def _drop_key(container):
    i = container["args"].index("--api-key")
    del container["args"][i : i + 2]


def _literal_key(container):
    _drop_key(container)
    container["args"].append("--api-key=hunter2hunter2hunter2")


def _ingress(docs):
    return kind(docs, "NetworkPolicy", "sglang-kimi-workers")[0]["spec"]["ingress"]


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
    "LeaderWorkerSet/sglang-kimi leader container sglang: no --api-key": lambda d: _drop_key(
        leader(d)["containers"][0]
    ),
    "worker container sglang: --api-key is not $(VAR)": lambda d: kind(d, "LeaderWorkerSet")[0]["spec"][
        "leaderWorkerTemplate"
    ]["workerTemplate"]["spec"]["containers"][0].pop("env"),
    "reach each other": lambda d: _ingress(d).pop(),
    "ingress[2] lets pods other than the router": lambda d: _ingress(d)[2].pop("ports"),
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


def test_only_the_router_and_the_scraper_reach_the_replicas_serving_port(single, multinode):
    """The NetworkPolicy as rendered: the replicas isolated for ingress, port 30000 open to the
    router's pods of this namespace and to Prometheus's, and in a multi-node replica the pods of
    a group open to each other on every port but 30000."""
    for docs in (single, multinode):
        (policy,) = kind(docs, "NetworkPolicy")
        spec = policy["spec"]
        assert spec["podSelector"] == {"matchLabels": manifests.WORKER_LABELS} and spec["policyTypes"] == ["Ingress"]
        router, scraper, *peers = spec["ingress"]
        assert router == {
            "from": [{"podSelector": {"matchLabels": manifests.ROUTER_LABELS}}],
            "ports": [{"protocol": "TCP", "port": manifests.SERVING_PORT}],
        }
        assert scraper["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": manifests.SCRAPER_LABELS}}]
        assert scraper["ports"] == router["ports"]
        if docs is single:
            assert peers == []
        else:
            (group,) = peers
            assert group["from"] == [{"podSelector": {"matchLabels": manifests.WORKER_LABELS}}]
            assert [(p["port"], p["endPort"]) for p in group["ports"]] == [(1, 29999), (30001, 65535)]


def test_the_key_comes_from_the_secret_the_docs_tell_the_operator_to_create(single, multinode):
    for docs in (single, multinode):
        containers = [
            c
            for d in docs
            if d["kind"] in ("Deployment", "LeaderWorkerSet")
            for c in (
                [d["spec"]["template"]["spec"]["containers"][0]]
                if d["kind"] == "Deployment"
                else [
                    t["spec"]["containers"][0]
                    for k, t in d["spec"]["leaderWorkerTemplate"].items()
                    if k.endswith("Template")
                ]
            )
        ]
        assert len(containers) in (2, 3)
        for c in containers:
            assert c["args"][c["args"].index("--api-key") + 1] == "$(ROUTER_API_KEY)"
            assert _env(c, "ROUTER_API_KEY") == {
                "name": "ROUTER_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": manifests.API_KEY_SECRET, "key": "api-key"}},
            }
    assert "kubectl create secret generic sglang-kimi-api-key" in (REPO_ROOT / "docs" / "scale-out.md").read_text()
