"""What the rendered Kubernetes manifests must hold before anyone applies them.

Two checks on kustomize's output: :func:`schema_problems` (the OpenAPI schema of a pinned
Kubernetes release, strict) and :func:`policy_problems` (what a replica of Kimi K2.5 needs and what
the schema cannot know: eight GPUs, shared memory, probes that outlast a 45-minute load, one
replica down at a time, a router allowed to find the replicas). Each problem is one line naming
the resource and what to add.
"""

from __future__ import annotations

from collections.abc import Iterator

KUBERNETES_VERSION = "1.37.0"  # the schema the manifests are validated against (kubernetes-validate)
GPU = "nvidia.com/gpu"
GPUS_PER_REPLICA = 8
MODEL_LOAD_SECONDS = 45 * 60  # the longest model load a startup probe must allow
WORKER_LABELS = {"app.kubernetes.io/name": "sglang-kimi", "app.kubernetes.io/component": "worker"}
LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index=0"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _name(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def schema_problems(docs: list[dict], version: str = KUBERNETES_VERSION) -> list[str]:
    """Each manifest against Kubernetes ``version``'s OpenAPI schema (strict: no unknown fields);
    a LeaderWorkerSet's pod templates as PodTemplates (there is no schema for the CRD itself)."""
    import kubernetes_validate

    problems = []
    for doc in docs:
        checked = [doc]
        if doc.get("kind") == "LeaderWorkerSet":
            lwt = doc.get("spec", {}).get("leaderWorkerTemplate", {})
            checked = [
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": f"{doc['metadata']['name']}-{part}"},
                    "template": lwt[part],
                }
                for part in ("leaderTemplate", "workerTemplate")
                if part in lwt
            ]
        for item in checked:
            try:
                kubernetes_validate.validate(item, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                problems.append(f"{_name(doc)}: {where}: {exc.message}")
    return problems


# ---------------------------------------------------------------- policy


def _pod_templates(doc: dict) -> Iterator[tuple[str, dict, bool]]:
    """(where, pod template, serves HTTP) of every pod a workload of replicas makes."""
    spec = doc.get("spec", {})
    if doc.get("kind") == "Deployment" and _is_worker(spec.get("template", {})):
        yield _name(doc), spec["template"], True
    elif doc.get("kind") == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate", {})
        yield f"{_name(doc)} leader", lwt.get("leaderTemplate", {}), True
        if "workerTemplate" in lwt:
            yield f"{_name(doc)} worker", lwt["workerTemplate"], False


def _is_worker(template: dict) -> bool:
    labels = template.get("metadata", {}).get("labels", {})
    return all(labels.get(k) == v for k, v in WORKER_LABELS.items())


def _container_problems(where: str, pod: dict, serves: bool) -> list[str]:
    spec = pod.get("spec", {})
    shm_volumes = {v["name"] for v in spec.get("volumes", []) if v.get("emptyDir", {}).get("medium") == "Memory"}
    problems = []
    for c in spec.get("containers", [])[:1]:
        resources = c.get("resources", {})
        for kind in ("limits", "requests"):
            got = str(resources.get(kind, {}).get(GPU, ""))
            if got != str(GPUS_PER_REPLICA):
                problems.append(f"{where}: resources.{kind}['{GPU}'] is '{got}', must be {GPUS_PER_REPLICA}")
        if not any(
            m.get("mountPath") == "/dev/shm" and m.get("name") in shm_volumes for m in c.get("volumeMounts", [])
        ):
            problems.append(f"{where}: no /dev/shm from an emptyDir with medium Memory (NCCL needs it)")
        if serves:
            problems += _probe_problems(where, c)
    if not spec.get("containers"):
        problems.append(f"{where}: no container")
    return problems


def _probe_problems(where: str, container: dict) -> list[str]:
    problems = [f"{where}: no {p}" for p in PROBES if p not in container]
    startup = container.get("startupProbe")
    if startup:
        budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
        if budget < MODEL_LOAD_SECONDS:
            problems.append(
                f"{where}: startupProbe allows {budget} s, a model load takes up to "
                f"{MODEL_LOAD_SECONDS} s: raise failureThreshold"
            )
    return problems


def _rollout_problems(doc: dict) -> list[str]:
    spec = doc.get("spec", {})
    rolling = (
        spec.get("strategy", {}).get("rollingUpdate")
        if doc["kind"] == "Deployment"
        else spec.get("rolloutStrategy", {}).get("rollingUpdateConfiguration")
    ) or {}
    if str(rolling.get("maxUnavailable")) != "1" or str(rolling.get("maxSurge", 0)) != "0":
        return [
            f"{_name(doc)}: a rollout must take down one replica at a time and add none (maxUnavailable 1, maxSurge 0)"
        ]
    return []


def _selects_workers(selector: dict) -> bool:
    return bool(selector) and all(WORKER_LABELS.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _router_problems(docs: list[dict], multinode: bool) -> list[str]:
    routers = [d for d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"] == "sglang-router"]
    if not routers:
        return ["no Deployment/sglang-router"]
    pod = routers[0]["spec"]["template"]["spec"]
    account = pod.get("serviceAccountName")
    args = pod["containers"][0].get("args", [])
    problems = []
    if "--service-discovery" not in args:
        problems.append("Deployment/sglang-router: no --service-discovery")
    wanted = {f"{k}={v}" for k, v in WORKER_LABELS.items()} | ({LEADER_LABEL} if multinode else set())
    if missing := wanted - set(args):
        problems.append(f"Deployment/sglang-router: --selector lacks {sorted(missing)}")
    roles = {
        d["metadata"]["name"]
        for d in docs
        if d.get("kind") == "Role"
        and any(
            "" in r.get("apiGroups", [])
            and "pods" in r.get("resources", [])
            and {"get", "list", "watch"} <= set(r.get("verbs", []))
            for r in d.get("rules", [])
        )
    }
    bound = any(
        d.get("kind") == "RoleBinding"
        and d["roleRef"].get("kind") == "Role"
        and d["roleRef"]["name"] in roles
        and any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in d.get("subjects", []))
        for d in docs
    )
    if not account or not any(d.get("kind") == "ServiceAccount" and d["metadata"]["name"] == account for d in docs):
        problems.append("Deployment/sglang-router: no serviceAccountName of a ServiceAccount in the manifests")
    elif not bound:
        problems.append(f"ServiceAccount/{account}: no RoleBinding to a Role that can get, list and watch pods")
    return problems


def policy_problems(docs: list[dict]) -> list[str]:
    multinode = any(d.get("kind") == "LeaderWorkerSet" for d in docs)
    workloads = [d for d in docs if any(True for _ in _pod_templates(d))]
    if not workloads:
        return [f"no workload of replicas (a Deployment or LeaderWorkerSet labelled {WORKER_LABELS})"]
    problems = []
    for doc in workloads:
        for where, pod, serves in _pod_templates(doc):
            problems += _container_problems(where, pod, serves)
        problems += _rollout_problems(doc)
    if not any(
        d.get("kind") == "PodDisruptionBudget"
        and _selects_workers(d["spec"].get("selector", {}))
        and str(d["spec"].get("maxUnavailable")) == "1"
        for d in docs
    ):
        problems.append("no PodDisruptionBudget with maxUnavailable 1 selecting the replicas")
    if not any(
        d.get("kind") == "Service" and d["spec"].get("selector", {}).get("app.kubernetes.io/name") == "sglang-router"
        for d in docs
    ):
        problems.append("no Service in front of the router")
    return problems + _router_problems(docs, multinode)
