"""Two replicas behind SGLang's router, for real: the Compose project `python build.py deploy`
renders, brought up by Debian's docker-compose (v1) with the CPU override, on the production line.

The product image is built on the stand-in base as in tests/test_image_build.py; the router image
is docker/router/Dockerfile on Debian bookworm (the stand-in for debian:bookworm-slim, plus this
machine's CAs for pip), built with the exact command `deploy` prints. All traffic goes to the
router's port, published on 127.0.0.1 only; the replicas talk to the router on the project's own
bridge network. The project is rendered with an API key file: the router and the replicas require
its key, which the tests send with every request but the ones that must be refused. Bounded: every
load has a fixed number of requests and a deadline.

What the docs promise (docs/scale-out.md, "What was tested here") and these tests assert: requests
through the router come back with the speculative metrics and both replicas serve some; with one
replica killed under load, no request fails (the router retries on the other one), the killed one
is ejected within EJECT_SECONDS and, restarted, serves again.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import image_standin
import pytest
import sglang_runtime
from docker_engine import compose_cli
from helpers import REPO_ROOT, run_cli
from test_image_build import TEST_BUILD_ARGS, copy_project, image_cli, scripts

from sglpatch.ship import deploy
from sglpatch.upstream.pin import read_pin

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.lines("production")]

REPO = "sglpatch-test/scale-out/sglang-kimi"  # its own tags: the image tests check theirs by tag
REPLICAS = 2
EJECT_SECONDS = 20  # 2 failed health checks 5 s apart, plus a 5 s timeout, plus slack
UP_TIMEOUT = 900
LOAD_REQUESTS = 24
LOAD_CONCURRENCY = 3
LOAD_DEADLINE = 600
SHORT = {**scripts.GREEDY, "max_new_tokens": 4}


def _say(message: str) -> None:
    sys.__stderr__.write(f"\n[scale-out] {message}\n")
    sys.__stderr__.flush()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Project:
    """A rendered Compose project run with docker-compose against the test engine."""

    def __init__(self, directory: Path, engine, models: Path, name: str, key: str):
        self.dir, self.engine, self.name, self.key = directory, engine, name, key
        self.port, self.metrics_port = _free_port(), _free_port()
        self.env = {
            **os.environ,
            **engine.env(),
            "ROUTER_PORT": str(self.port),
            "ROUTER_METRICS_PORT": str(self.metrics_port),
            "MODEL_DIR": str(models),
        }

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        argv = [compose_cli(), "-p", self.name, "-f", "compose.yaml", "-f", "cpu.yaml", *args]
        out = subprocess.run(
            argv, cwd=self.dir, env=self.env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout
        )
        if check and out.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
        return out

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def health(self, service: str) -> str:
        state = self.engine.docker("inspect", "--format", "{{json .State}}", self.container(service), check=False)
        if state.returncode != 0:
            return "gone"
        state = json.loads(state.stdout)
        return state.get("Health", {}).get("Status", "running") if state["Running"] else "exited"

    def served(self, service: str) -> int:
        """How many /generate requests the replica has answered (its access log)."""
        logs = self.compose("logs", "--no-color", service, check=False).stdout
        return len(re.findall(r'"POST /generate HTTP/1\.1" 200', logs))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def auth(self, key: str | None = "") -> dict[str, str]:
        """The header that carries ``key`` (the project's by default; None: no header)."""
        key = self.key if key == "" else key
        return {"Authorization": f"Bearer {key}"} if key is not None else {}

    def generate(
        self, prompt: str, timeout: float = 300, sampling: dict = scripts.GREEDY, key: str | None = ""
    ) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.url("/generate"),
            headers={"Content-Type": "application/json", **self.auth(key)},
            data=json.dumps({"text": prompt, "sampling_params": sampling}).encode(),
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {"error": exc.read().decode(errors="replace")[:500]}
        except (urllib.error.URLError, OSError) as exc:
            return 0, {"error": str(exc)}

    def workers(self) -> list[dict]:
        with urllib.request.urlopen(
            urllib.request.Request(self.url("/workers"), headers=self.auth()), timeout=10
        ) as resp:
            return json.loads(resp.read())["workers"]


def _prompt(i: int) -> str:
    # distinct first words: the cache-aware policy has no shared prefix to stick to
    return f"{i} {scripts.PROMPTS[i % len(scripts.PROMPTS)]}"


@pytest.fixture(scope="module")
def images(tmp_path_factory, docker_engine, standin_base):
    project = copy_project(tmp_path_factory.mktemp("scale-out") / "project")
    start = time.monotonic()
    built = image_cli(project, docker_engine, "--repo", REPO, "--base-image", standin_base, *TEST_BUILD_ARGS, "--json")
    assert built.returncode == 0, built.stderr[-6000:]
    key_file = project.parent / "api-key.env"
    key = secrets.token_hex(32)
    key_file.write_text(f"ROUTER_API_KEY={key}\n")
    key_file.chmod(0o600)
    rendered = run_cli(
        project,
        "deploy",
        "--replicas",
        str(REPLICAS),
        "--gpus",
        str(8 * REPLICAS),  # the CPU run leaves gpu.yaml out, but the project is rendered for a host
        "--api-key-file",
        str(key_file),
        "--repo",
        REPO,
        "--json",
    )
    assert rendered.returncode == 0, rendered.stderr
    data = {**json.loads(rendered.stdout), "api_key": key}
    assert not [p for p in Path(data["out"]).rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    base = image_standin.router_base(docker_engine, sglang_runtime.cache_dir())
    argv = deploy.router_build_argv(REPO_ROOT, data["images"]["sglang-router"], base_image=base)
    router = subprocess.run(
        [docker_engine.builder.client, *argv[1:]],
        env=docker_engine.env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    assert router.returncode == 0, router.stderr[-4000:]
    _say(f"product and router images built in {time.monotonic() - start:.0f}s")
    return data


@pytest.fixture(scope="module")
def up(images, docker_engine, always0_pair, tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(always0_pair[0], models / "target")
    shutil.copytree(always0_pair[1], models / "draft")
    project = Project(
        Path(images["compose"]), docker_engine, models, f"sglpatch-scale-{os.getpid()}", images["api_key"]
    )
    start = time.monotonic()
    try:
        project.compose("up", "-d", timeout=UP_TIMEOUT)  # returns once the replicas are healthy and the router runs
        _say(f"router and {REPLICAS} replicas up in {time.monotonic() - start:.0f}s")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and project.health("router") != "healthy":
            time.sleep(2)
        yield project
    finally:
        logs = project.compose("logs", "--no-color", "--tail", "40", check=False).stdout
        project.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)
        if sys.exc_info()[0] is not None:
            _say(logs[-6000:])


def test_requests_through_the_router_come_back_speculative_from_both_replicas(up):
    assert [up.health(f"replica-{i}") for i in range(REPLICAS)] == ["healthy"] * REPLICAS
    assert up.health("router") == "healthy"
    fields = scripts.spec_fields(read_pin(REPO_ROOT).version)
    # Four at a time: with no prefix to match, the cache-aware policy sends a request to the least
    # loaded replica (one after the other, both are idle and the first one listed wins every time).
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: up.generate(_prompt(i)), range(8)))
    assert [status for status, _ in results] == [200] * 8, results
    for _, out in results:
        meta = out["meta_info"]
        assert all(f in meta for f in fields.values()), sorted(meta)
        assert meta["spec_accept_length"] > 1, meta
    served = {f"replica-{i}": up.served(f"replica-{i}") for i in range(REPLICAS)}
    _say(f"8 requests through the router, served per replica: {served}")
    assert sum(served.values()) == 8 and all(served.values()), served


def _from_the_router(project: Project, url: str, key: str | None) -> int:
    """The status of a POST to ``url`` sent from inside the router's container (the replicas
    publish no port: only the project's network reaches them)."""
    script = (
        "import json, sys, urllib.error, urllib.request\n"
        "key = sys.argv[2]\n"
        "headers = {'Content-Type': 'application/json', **({'Authorization': 'Bearer ' + key} if key else {})}\n"
        "body = json.dumps({'text': 'Hello', 'sampling_params': {'max_new_tokens': 2}}).encode()\n"
        "request = urllib.request.Request(sys.argv[1], data=body if sys.argv[1].endswith('/generate') else None, "
        "headers=headers)\n"
        "try:\n    print(urllib.request.urlopen(request, timeout=120).status)\n"
        "except urllib.error.HTTPError as exc:\n    print(exc.code)\n"
    )
    out = project.engine.docker("exec", project.container("router"), "python3", "-c", script, url, key or "")
    return int(out.stdout.strip())


def test_the_router_and_the_replicas_require_the_api_key(up):
    """Without the key (or with another) the router answers 401; with it the request is served,
    which also proves the router passes its key on: the replicas refuse a request without it."""
    assert up.generate(_prompt(0), key=None)[0] == 401
    assert up.generate(_prompt(0), key="not-" + up.key)[0] == 401
    status, out = up.generate(_prompt(0))
    assert status == 200 and out["meta_info"]["completion_tokens"] >= 1, out
    replica = "http://replica-0:30000"
    statuses = {
        "without": _from_the_router(up, f"{replica}/generate", None),
        "another": _from_the_router(up, f"{replica}/generate", "x" * 64),
        "with": _from_the_router(up, f"{replica}/generate", up.key),
        "health": _from_the_router(up, f"{replica}/health", None),  # what its health check asks
    }
    _say(f"/generate on the router without the key: 401, with it: 200; on replica-0 directly: {statuses}")
    assert statuses == {"without": 401, "another": 401, "with": 200, "health": 200}
    # the probes and the router's readiness need no key
    with urllib.request.urlopen(up.url("/readiness"), timeout=10) as resp:
        assert resp.status == 200


def _metrics_from_the_router(project: Project, url: str) -> str:
    """GET ``url``'s /metrics text from inside the router's container (the project's network)."""
    script = "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())\n"
    return project.engine.docker("exec", project.container("router"), "python3", "-c", script, url).stdout


def test_every_metric_the_dashboard_queries_is_exported_by_the_router_and_each_replica(up):
    """The Grafana dashboard (deploy/monitoring) against the live project, as Prometheus would scrape it
    (monitoring/prometheus.yml: router:29000 and replica-<i>:30000/metrics, no key)."""
    from sglpatch.ship import monitoring

    status, _ = up.generate(_prompt(7))
    # a counter or histogram appears once its replica has served a request: one each, directly
    statuses = [_from_the_router(up, f"http://replica-{i}:30000/generate", up.key) for i in range(2)]
    assert [status, *statuses] == [200, 200, 200]
    with urllib.request.urlopen(f"http://127.0.0.1:{up.metrics_port}/metrics", timeout=10) as resp:
        router = resp.read().decode()
    replicas = {f"replica-{i}": _metrics_from_the_router(up, f"http://replica-{i}:30000/metrics") for i in range(2)}
    used = monitoring.dashboard_metrics(monitoring.load_dashboard(REPO_ROOT))
    wanted = {
        "router": {m for m in used if m.startswith("smg_")},
        **{name: {m for m in used if m.startswith("sglang:")} for name in replicas},
    }
    assert wanted["router"] and wanted["replica-0"] and wanted["router"] | wanted["replica-0"] == used
    texts = {"router": router, **replicas}
    missing = {name: monitoring.missing_metrics(wanted[name], texts[name]) for name in texts}
    _say(f"dashboard metrics: {len(used)}; exported by the router: {len(monitoring.exported_metrics(router))} names")
    assert missing == {name: [] for name in texts}
    # negative twin: a name the servers do not export is flagged
    assert monitoring.missing_metrics({"sglang:spec_accept_len"}, replicas["replica-0"]) == ["sglang:spec_accept_len"]


def test_every_router_flag_in_the_templates_is_one_the_pinned_router_knows(images, docker_engine):
    import yaml

    helped = docker_engine.docker("run", "--rm", images["images"]["sglang-router"], "--help").stdout
    known = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", helped))
    compose = yaml.safe_load((Path(images["compose"]) / "compose.yaml").read_text())["services"]["router"]
    k8s = [
        d
        for d in yaml.safe_load_all((Path(images["out"]) / "k8s" / "single.rendered.yaml").read_text())
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "sglang-router"
    ][0]
    used = {
        a for a in compose["command"] + k8s["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--")
    }
    assert {"--service-discovery", "--worker-urls", "--retry-max-retries", "--cb-failure-threshold"} <= used
    assert used - known == set() and "--no-such-router-flag" not in known


def _load(project: Project, on_progress) -> list[tuple[int, float, str | None]]:
    """LOAD_REQUESTS requests, LOAD_CONCURRENCY at a time, within LOAD_DEADLINE: (status, end time,
    error)."""
    deadline = time.monotonic() + LOAD_DEADLINE
    results = []

    def one(i):
        if time.monotonic() > deadline:
            return 0, time.monotonic(), "deadline"
        status, out = project.generate(_prompt(100 + i), timeout=max(1.0, deadline - time.monotonic()), sampling=SHORT)
        return status, time.monotonic(), out.get("error")

    with concurrent.futures.ThreadPoolExecutor(LOAD_CONCURRENCY) as pool:
        for result in pool.map(one, range(LOAD_REQUESTS)):
            results.append(result)
            on_progress(len(results))
    return results


def test_a_replica_killed_under_load_is_ejected_no_request_fails_and_it_rejoins(up, docker_engine):
    """The replica's main process dies of SIGKILL (sent from the host, as the kernel's OOM killer
    would): the router ejects it, retries what was in flight on the other replica, and the
    restart policy brings it back."""
    victim = up.container("replica-1")
    restarts = int(docker_engine.docker("inspect", "--format", "{{.RestartCount}}", victim).stdout)
    killed = {}

    def on_progress(done):
        if done == 4 and not killed:
            pid = int(docker_engine.docker("inspect", "--format", "{{.State.Pid}}", victim).stdout)
            os.kill(pid, signal.SIGKILL)
            killed["at"] = time.monotonic()

    start = time.monotonic()
    with RouterWatch(up, "replica-1") as watch:
        results = _load(up, on_progress)
        _wait(lambda: watch.first(False, after=killed["at"]) is not None, killed["at"], 120)
    ejected = watch.first(False, after=killed["at"]) - killed["at"]
    failed = [(s, error) for s, _, error in results if s != 200]
    _say(
        f"load: {len(results)} sent, {len(results) - len(failed)} served, {len(failed)} failed in "
        f"{time.monotonic() - start:.0f}s; replica-1 killed after 4, ejected {ejected:.1f}s after the kill"
    )
    assert len(results) == LOAD_REQUESTS and not failed, (failed, _router_errors(up))
    assert ejected <= EJECT_SECONDS

    # the restart policy brings it back; healthy, the router takes it again and sends it work
    healthy = _wait(lambda: up.health("replica-1") == "healthy", killed["at"], UP_TIMEOUT)
    assert int(docker_engine.docker("inspect", "--format", "{{.RestartCount}}", victim).stdout) == restarts + 1
    rejoined = _wait(lambda: _healthy_in_router(up, "replica-1"), killed["at"], UP_TIMEOUT)
    served_before = up.served("replica-1")
    rounds = 0
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two at a time: one reaches each replica
        while up.served("replica-1") == served_before and rounds < 6:
            assert [
                s
                for s, _ in pool.map(
                    lambda i: up.generate(_prompt(300 + i), sampling=SHORT), (2 * rounds, 2 * rounds + 1)
                )
            ] == [200, 200]
            rounds += 1
    _say(
        f"replica-1 restarted by its policy: healthy {healthy:.0f}s after the kill, back in the router "
        f"after {rejoined:.0f}s, served again within {rounds} rounds of 2 requests"
    )
    assert up.served("replica-1") > served_before


def _router_errors(project: Project) -> str:
    logs = project.compose("logs", "--no-color", "router", check=False).stdout
    return "\n".join(
        l[-300:] for l in re.sub(r"\x1b\[[0-9;]*m", "", logs).splitlines() if "ERROR" in l or "status_code=5" in l
    )[-6000:]


def _wait(predicate, since: float, timeout: float) -> float:
    """Seconds from ``since`` until ``predicate()`` holds (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s"
        time.sleep(0.5)
    return time.monotonic() - since


class RouterWatch:
    """Polls the router's /workers every half second in the background: when it first saw the
    service healthy or not (the load would otherwise hide the moment of the ejection)."""

    def __init__(self, project: Project, service: str):
        self.project, self.service, self.seen = project, service, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.seen.append((time.monotonic(), _healthy_in_router(self.project, self.service)))
            except OSError:
                pass
            self._stop.wait(0.5)

    def first(self, healthy: bool, after: float) -> float | None:
        return next((t for t, h in list(self.seen) if t >= after and h == healthy), None)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def _healthy_in_router(project: Project, service: str) -> bool:
    return any(service in w.get("url", "") and w.get("is_healthy") for w in project.workers())
