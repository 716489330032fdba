"""Monitoring (sglpatch/ship/monitoring.py): the Prometheus configuration `deploy` renders for the
Compose project, the Grafana dashboard, and the metric names the dashboard queries.

Fast: the metric names are held against /metrics text captured from a real replica (the production
line's patched SGLang 0.5.9 on the CPU harness, EAGLE-3 on the always-accept pair, after three
requests) and a real sglang-router 0.3.2 in front of it (tests/fixtures/metrics/). The live check,
against the image's replicas and the router as Compose runs them, is in tests/ship/test_scale_out.py.
The configuration and the queries also go through Debian's promtool.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from deploy_render import rendered  # noqa: F401  (fixture)
from helpers import REPO_ROOT

from sglpatch.errors import UserError
from sglpatch.ship import monitoring

CAPTURED = REPO_ROOT / "tests" / "fixtures" / "metrics"
# What issue 39 asks the dashboard to show, as SGLang 0.5.9 and sglang-router 0.3.2 name it.
ASKED = {
    "throughput": {"sglang:num_requests_total", "sglang:generation_tokens_total"},
    "EAGLE-3 accept length": {"sglang:spec_accept_length"},
    "queue": {"sglang:num_queue_reqs"},
    "TTFT": {"sglang:time_to_first_token_seconds_bucket"},
    "router requests and errors": {"smg_router_requests_total", "smg_http_responses_total"},
}


@pytest.fixture(scope="module")
def dashboard():
    return monitoring.load_dashboard(REPO_ROOT)


@pytest.fixture(scope="module")
def captured():
    return "".join(p.read_text() for p in sorted(CAPTURED.glob("*.txt")))


@pytest.fixture(scope="module")
def promtool():
    import docker_engine

    if shutil.which("promtool") is None:
        try:
            docker_engine.apt_install(("prometheus",))
        except docker_engine.EngineError as exc:
            pytest.fail(f"promtool (Debian's prometheus): {exc}", pytrace=False)
    return shutil.which("promtool")


# ---------------------------------------------------------------- the dashboard's metrics


def test_every_metric_the_dashboard_queries_is_one_the_captured_servers_export(dashboard, captured):
    used = monitoring.dashboard_metrics(dashboard)
    assert monitoring.missing_metrics(used, captured) == []
    # negative twin: a name no server exports is flagged
    assert monitoring.missing_metrics(used | {"sglang:spec_accept_len"}, captured) == ["sglang:spec_accept_len"]


def test_the_dashboard_shows_what_the_issue_asks_for(dashboard):
    used = monitoring.dashboard_metrics(dashboard)
    assert {what: sorted(names - used) for what, names in ASKED.items() if names - used} == {}


def test_metric_names_are_read_from_promql_without_functions_labels_or_durations():
    expr = (
        'histogram_quantile(0.95, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{job="x"}[5m])))'
        " / on (instance) group_left avg without (tp_rank) (sglang:spec_accept_length offset 1h)"
    )
    assert monitoring.query_metrics(expr) == {"sglang:time_to_first_token_seconds_bucket", "sglang:spec_accept_length"}
    assert monitoring.exported_metrics('# HELP a b\na_total{x="1 2"} 3\nb 1\n') == {"a_total", "b"}


def test_the_dashboard_is_well_formed_and_every_panel_has_a_query(dashboard):
    assert monitoring.dashboard_problems(dashboard) == []
    assert len(monitoring.dashboard_queries(dashboard)) >= 10
    # negative twin: a panel without a query, a duplicate id and a missing position are reported
    broken = json.loads(json.dumps(dashboard))
    broken["panels"][1]["targets"] = []
    broken["panels"][2]["id"] = broken["panels"][3]["id"]
    del broken["panels"][4]["gridPos"]
    problems = monitoring.dashboard_problems(broken)
    assert f"{broken['panels'][1]['title']} has no query" in problems
    assert "two panels share an id" in problems
    assert f"{broken['panels'][4]['title']} has no gridPos" in problems


def test_every_dashboard_query_is_promql_that_promtool_accepts(dashboard, promtool, tmp_path):
    def check(queries):
        rules = {
            "groups": [
                {
                    "name": "dashboard",
                    # Grafana fills in $__rate_interval; promtool needs a duration
                    "rules": [
                        {"record": f"dashboard:q{i}", "expr": q.replace("$__rate_interval", "5m")}
                        for i, q in enumerate(queries)
                    ],
                }
            ]
        }
        path = tmp_path / "rules.yml"
        path.write_text(yaml.safe_dump(rules))
        return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)

    ok = check(monitoring.dashboard_queries(dashboard))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = check(["sum by (instance (rate(sglang:num_requests_total[5m]))"])  # the twin: a parenthesis short
    assert bad.returncode != 0


# ---------------------------------------------------------------- Prometheus for Compose


def test_the_rendered_prometheus_config_names_every_replica_and_the_router(rendered, promtool):  # noqa: F811
    out, data = rendered
    config = out / "compose" / "monitoring" / "prometheus.yml"
    jobs = {j["job_name"]: j for j in yaml.safe_load(config.read_text())["scrape_configs"]}
    targets = {name: [t for c in job["static_configs"] for t in c["targets"]] for name, job in jobs.items()}
    assert targets == {
        "sglang-router": ["router:29000"],
        "sglang-kimi": [f"replica-{i}:30000" for i in range(data["replicas"])],
    }
    assert jobs["sglang-kimi"]["metrics_path"] == "/metrics"
    checked = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_replica_targets_follow_the_replica_count():
    template = yaml.safe_load((REPO_ROOT / monitoring.TEMPLATES / "prometheus.yml").read_text())
    for replicas in (1, 4):
        job = monitoring.prometheus_config(template, replicas)["scrape_configs"][1]
        assert job["static_configs"] == [{"targets": [f"replica-{i}:30000" for i in range(replicas)]}]
    # negative twin: a template without the replicas' job is refused
    template["scrape_configs"] = template["scrape_configs"][:1]
    with pytest.raises(UserError, match="lacks the scrape job"):
        monitoring.prometheus_config(template, 2)


def test_monitoring_is_published_on_loopback_only_and_mounts_what_deploy_wrote(rendered):  # noqa: F811
    compose = rendered[0] / "compose"
    services = yaml.safe_load((compose / "monitoring.yaml").read_text())["services"]
    assert sorted(services) == ["grafana", "prometheus"]
    ports = [p for s in services.values() for p in s["ports"]]
    assert ports and all(p.startswith("127.0.0.1:") for p in ports)
    mounted = [v.split(":")[0] for s in services.values() for v in s["volumes"] if v.startswith("./")]
    assert all((compose / m).exists() for m in mounted) and len(mounted) == 3
    env = dict(line.split("=", 1) for line in (compose / ".env").read_text().splitlines())
    assert (env["PROMETHEUS_IMAGE"], env["GRAFANA_IMAGE"]) == (monitoring.PROMETHEUS_IMAGE, monitoring.GRAFANA_IMAGE)
    provisioned = yaml.safe_load((compose / "monitoring/grafana/provisioning/datasources/prometheus.yaml").read_text())
    assert provisioned["datasources"][0]["url"] == "http://prometheus:9090"
    dashboard = json.loads((compose / "monitoring" / monitoring.DASHBOARD).read_text())
    sources = {t["datasource"]["uid"] for t in monitoring.dashboard_targets(dashboard)}
    assert sources == {provisioned["datasources"][0]["uid"]}


def test_docker_compose_accepts_the_project_with_monitoring(rendered):  # noqa: F811
    import docker_engine

    try:
        cli = docker_engine.compose_cli()
    except docker_engine.EngineError as exc:
        pytest.fail(f"docker-compose: {exc}", pytrace=False)
    argv = [cli, "-f", "compose.yaml", "-f", "gpu.yaml", "-f", "monitoring.yaml", "config"]
    out = subprocess.run(argv, cwd=rendered[0] / "compose", capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    published = {
        name: [p if isinstance(p, str) else f"{p.get('host_ip')}:{p.get('published')}" for p in services[name]["ports"]]
        for name in ("prometheus", "grafana")
    }
    assert all(p.startswith("127.0.0.1:") for ports in published.values() for p in ports), published
    assert {"replica-0", "router", "prometheus", "grafana"} <= set(services)


def test_kubernetes_pods_that_serve_metrics_carry_the_scrape_annotations(rendered):  # noqa: F811
    import deploy_render

    for overlay in ("single", "multinode"):
        docs = deploy_render.load_all(rendered[0] / "k8s" / f"{overlay}.rendered.yaml")
        router = deploy_render.kind(docs, "Deployment", "sglang-router")[0]["spec"]["template"]["metadata"]
        if overlay == "single":
            replica = deploy_render.kind(docs, "Deployment", "sglang-kimi")[0]["spec"]["template"]["metadata"]
        else:
            lws = deploy_render.kind(docs, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]
            replica = lws["leaderTemplate"]["metadata"]
            assert "prometheus.io/scrape" not in lws["workerTemplate"]["metadata"].get("annotations", {})
        ports = {
            name: (meta["annotations"]["prometheus.io/scrape"], meta["annotations"]["prometheus.io/port"])
            for name, meta in (("router", router), ("replica", replica))
        }
        assert ports == {"router": ("true", "29000"), "replica": ("true", "30000")}, overlay
