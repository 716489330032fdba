"""What the rendered Kubernetes manifests must hold before anyone applies them.

Two checks on kustomize's output: :func:`schema_problems` (the OpenAPI schema of a pinned
Kubernetes release, strict) and :func:`policy_problems` (what a replica of Kimi K2.5 needs and what
the schema cannot know: eight GPUs, shared memory, probes that outlast a 45-minute load, one
replica down at a time, a router allowed to find the replicas, the API key from a Secret only, and
a NetworkPolicy that lets only the router reach the replicas' serving port). Each problem is one
line naming the resource and what to add.
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
ROUTER_LABELS = {"app.kubernetes.io/name": "sglang-router"}
SCRAPER_LABELS = {"app.kubernetes.io/name": "prometheus"}  # may reach the serving port for /metrics
SERVING_PORT = 30000
DIST_INIT_PORT = 20000  # --dist-init-addr: the pods of a multi-node replica meet there
API_KEY_SECRET = "sglang-kimi-api-key"  # what the templates name; the policy asks for a Secret, not this one


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
    return problems + _router_problems(docs, multinode) + api_key_problems(docs) + network_problems(docs, multinode)


# ---------------------------------------------------------------- the API key


def _containers(doc: dict) -> Iterator[tuple[str, dict, bool]]:
    """(where, container, serves HTTP behind or as the router) of every container a Deployment
    or LeaderWorkerSet runs."""
    spec = doc.get("spec", {})
    if doc.get("kind") == "Deployment":
        template = spec.get("template", {})
        serves = doc["metadata"]["name"] == "sglang-router" or _is_worker(template)
        templates = [("", template, serves)]
    elif doc.get("kind") == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate", {})
        templates = [
            (f" {part[:-8]}", lwt[part], part == "leaderTemplate") for part in lwt if part.endswith("Template")
        ]
    else:
        templates = []
    for part, template, serves in templates:
        for c in template.get("spec", {}).get("containers", []):
            yield f"{_name(doc)}{part} container {c.get('name')}", c, serves


def _key_source(container: dict) -> tuple[str, str] | str | None:
    """Where the container's ``--api-key`` comes from: the (Secret, key) of a secretKeyRef, a
    string saying what is wrong, or None without ``--api-key``."""
    argv = [str(a) for a in container.get("command", []) + container.get("args", [])]
    values = [
        a.partition("=")[2] if a.startswith("--api-key=") else (argv[i + 1] if i + 1 < len(argv) else "")
        for i, a in enumerate(argv)
        if a == "--api-key" or a.startswith("--api-key=")
    ]
    if not values:
        return None
    env = {e.get("name"): e for e in container.get("env", [])}
    refs = set()
    for value in values:
        variable = value[2:-1] if value.startswith("$(") and value.endswith(")") else None
        ref = env.get(variable, {}).get("valueFrom", {}).get("secretKeyRef") if variable else None
        if not (ref and ref.get("name") and ref.get("key")):
            return "--api-key is not $(VAR) with VAR from a Secret (env valueFrom.secretKeyRef): a key in a manifest"
        refs.add((ref["name"], ref["key"]))
    return refs.pop() if len(refs) == 1 else "--api-key is given twice, from different Secrets"


def api_key_problems(docs: list[dict]) -> list[str]:
    """The router and every replica that serves HTTP require the API key; every ``--api-key``
    comes from a Secret (never a literal in a manifest), and the same one: the router sends its
    own key to the replicas."""
    problems, sources = [], {}
    for doc in docs:
        for where, container, serves in _containers(doc):
            source = _key_source(container)
            if isinstance(source, str):
                problems.append(f"{where}: {source}")
            elif source:
                sources[where] = source
            elif serves:
                problems.append(
                    f"{where}: no --api-key: take it from a Secret (env valueFrom.secretKeyRef, then $(VAR))"
                )
    if len(set(sources.values())) > 1:
        problems.append(
            f"--api-key comes from different Secrets {sorted(set(sources.values()))}: the router sends its own "
            "key to the replicas, so they must share one"
        )
    return problems


# ---------------------------------------------------------------- who reaches the replicas


def _may_select(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector may select pods labelled ``labels`` (matchExpressions: assumed so)."""
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _covers(ports: list[dict], port: int, names: set[str]) -> bool:
    """Whether a rule's ``ports`` admit TCP ``port`` (known by ``names`` too); none: all ports."""
    if not ports:
        return True
    for p in ports:
        value = p.get("port")
        if p.get("protocol", "TCP") != "TCP":
            continue
        if value is None or value in names or (isinstance(value, int) and value <= port <= p.get("endPort", value)):
            return True
    return False


def _peer(peer: dict) -> str | None:
    """Who a ``from`` entry admits, if it may reach the serving port (None: it may not)."""
    pods = peer.get("podSelector")
    if pods is None or "ipBlock" in peer:
        return None
    if "namespaceSelector" not in peer and _selects_only(pods, ROUTER_LABELS):
        return "router"
    if _selects_only(pods, SCRAPER_LABELS):
        return "scraper"
    return None


def _selects_only(selector: dict, labels: dict[str, str]) -> bool:
    """Whether every pod ``selector`` selects carries ``labels``."""
    return all(selector.get("matchLabels", {}).get(k) == v for k, v in labels.items())


def network_problems(docs: list[dict], multinode: bool) -> list[str]:
    """A NetworkPolicy isolates the replicas; whatever any policy admits to their serving port is
    the router (same namespace) or the metrics scraper; the router is admitted; and the pods of a
    multi-node replica reach each other (--dist-init-addr)."""
    names = {
        str(p["name"])
        for d in docs
        for _, pod, _ in _pod_templates(d)
        for c in pod.get("spec", {}).get("containers", [])
        for p in c.get("ports", [])
        if p.get("containerPort") == SERVING_PORT and p.get("name")
    }
    policies = [
        d
        for d in docs
        if d.get("kind") == "NetworkPolicy" and _may_select(d.get("spec", {}).get("podSelector", {}), WORKER_LABELS)
    ]
    problems = []
    if not any(
        "Ingress" in d["spec"].get("policyTypes", ["Ingress"]) and not d["spec"]["podSelector"].get("matchExpressions")
        for d in policies
    ):
        problems.append(f"no NetworkPolicy isolates the replicas: every pod could reach their port {SERVING_PORT}")
    admitted: set[str] = set()
    peers = False
    for doc in policies:
        for i, rule in enumerate(doc["spec"].get("ingress", [])):
            group = [p for p in rule.get("from", []) if "namespaceSelector" not in p and "podSelector" in p]
            if any(_selects_only(p["podSelector"], WORKER_LABELS) for p in group) and _covers(
                rule.get("ports", []), DIST_INIT_PORT, set()
            ):
                peers = True
            if not _covers(rule.get("ports", []), SERVING_PORT, names):
                continue
            who = [_peer(p) for p in rule.get("from", [])] or [None]
            if None in who:
                problems.append(
                    f"{_name(doc)}: ingress[{i}] lets pods other than the router and the metrics scraper reach the "
                    f"replicas' port {SERVING_PORT}"
                )
            admitted.update(w for w in who if w)
    if policies and "router" not in admitted:
        problems.append(f"no NetworkPolicy lets the router ({ROUTER_LABELS}) reach the replicas' port {SERVING_PORT}")
    if multinode and not peers:
        problems.append(
            f"no NetworkPolicy lets the pods of a replica reach each other (port {DIST_INIT_PORT} of "
            "--dist-init-addr, and NCCL's)"
        )
    return problems
