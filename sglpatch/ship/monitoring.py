"""Monitoring for the Compose project `deploy` writes: Prometheus and Grafana (opt-in, monitoring.yaml).

The templates are under ``deploy/monitoring``: ``prometheus.yml`` (scrape configuration, one target
per replica written here), Grafana's provisioning and its dashboard ``kimi-eagle3.json``. They are
rendered into ``compose/monitoring/`` beside the Compose files. The metric names the dashboard
queries are read back by :func:`dashboard_metrics` and held against what a running replica and
router export (:func:`exported_metrics`) by the tests.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from sglpatch.errors import UserError

TEMPLATES = Path("deploy") / "monitoring"
DASHBOARD = Path("grafana") / "dashboards" / "kimi-eagle3.json"
ROUTER_TARGET = "router:29000"
REPLICA_PORT = 30000
ROUTER_JOB = "sglang-router"
REPLICA_JOB = "sglang-kimi"
# By tag: Docker Hub, where they are published, is not reachable from where this was written, so
# no digest could be read; the operator pins them by digest in .env once pulled (docs/scale-out.md).
PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0"
GRAFANA_IMAGE = "grafana/grafana:12.0.0"

# PromQL words that look like metric names: functions, aggregations, keywords, and the labels
# named in `by (...)`/`without (...)` (removed before the names are read).
_PROMQL_WORDS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
_SELECTORS = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"")
_NAME = re.compile(r"(?<![\w:$.])[a-zA-Z_:][a-zA-Z0-9_:]*(?![\w:]|\s*\()")


def prometheus_config(template: dict, replicas: int) -> dict:
    """``template`` (deploy/monitoring/prometheus.yml) with one target per replica in the replicas' job."""
    doc = json.loads(json.dumps(template))
    jobs = {job.get("job_name"): job for job in doc.get("scrape_configs", [])}
    if ROUTER_JOB not in jobs or REPLICA_JOB not in jobs:
        raise UserError(
            f"{TEMPLATES / 'prometheus.yml'} lacks the scrape job {ROUTER_JOB} or {REPLICA_JOB}",
            "keep both jobs: deploy fills in the replicas' targets",
        )
    jobs[REPLICA_JOB]["static_configs"] = [
        {"targets": [f"replica-{i}:{REPLICA_PORT}" for i in range(replicas)]},
    ]
    return doc


def write_compose_monitoring(dest: Path, templates: Path, replicas: int, header: str) -> None:
    """``dest`` (compose/monitoring): prometheus.yml for ``replicas`` and Grafana's files as they are."""
    source = templates / "monitoring"
    dest.mkdir(parents=True)
    config = prometheus_config(yaml.safe_load((source / "prometheus.yml").read_text()), replicas)
    (dest / "prometheus.yml").write_text(header + yaml.safe_dump(config, sort_keys=False))
    shutil.copytree(source / "grafana", dest / "grafana")


def dashboard_targets(dashboard: dict) -> list[dict]:
    """Every query target of the dashboard's panels (rows' nested panels included)."""
    return [t for panel in _panels(dashboard) for t in panel.get("targets", [])]


def dashboard_queries(dashboard: dict) -> list[str]:
    """Every PromQL expression of the dashboard."""
    return [t["expr"] for t in dashboard_targets(dashboard) if t.get("expr")]


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out += _panels(panel) if panel.get("panels") else []
    return out


def dashboard_problems(dashboard: dict) -> list[str]:
    """What makes the dashboard unfit to load: a panel without a title, a position or a query."""
    problems = []
    if not dashboard.get("uid") or not dashboard.get("title"):
        problems.append("the dashboard has no uid or title")
    ids = [p.get("id") for p in _panels(dashboard)]
    if len(ids) != len(set(ids)):
        problems.append("two panels share an id")
    for panel in _panels(dashboard):
        name = panel.get("title") or f"panel {panel.get('id')}"
        if not panel.get("title"):
            problems.append(f"{name} has no title")
        if not {"h", "w", "x", "y"} <= set(panel.get("gridPos", {})):
            problems.append(f"{name} has no gridPos")
        if panel.get("type") != "row" and not [t for t in panel.get("targets", []) if t.get("expr")]:
            problems.append(f"{name} has no query")
    return problems


def query_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (labels, functions and durations left out)."""
    text = _SELECTORS.sub(" ", _GROUPING.sub(" ", expr))
    return {name for name in _NAME.findall(text) if name not in _PROMQL_WORDS}


def dashboard_metrics(dashboard: dict) -> set[str]:
    return {name for expr in dashboard_queries(dashboard) for name in query_metrics(expr)}


def exported_metrics(text: str) -> set[str]:
    """The metric names in a Prometheus text exposition (``/metrics``), each sample's name."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def missing_metrics(wanted: set[str], text: str) -> list[str]:
    """The names of ``wanted`` that no sample of the exposition ``text`` carries."""
    return sorted(wanted - exported_metrics(text))


def load_dashboard(repo_root: Path) -> dict:
    path = repo_root / TEMPLATES / DASHBOARD
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the dashboard {path}: {exc}", "fix the JSON under deploy/monitoring") from None
