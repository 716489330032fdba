#!/usr/bin/env python3
"""Decode throughput of Kimi K2.5 on this machine's GPUs: baseline vs EAGLE-3, with and without
FlashInfer allreduce fusion. Same prompts, greedy, batch size 1, one fresh server per configuration.

Runs only where SGLang and enough NVIDIA GPUs are present (inside the image, for instance):

    docker run --rm --gpus all --ipc=host -v /models:/models:ro -v "$PWD:/src" -w /src \
      --entrypoint python3 IMAGE benchmarks/gpu_eagle3.py \
      --model /models/Kimi-K2.5 --draft /models/kimi-k2.5-eagle3

Elsewhere it says why and exits with status 2. The reference column (8x RTX PRO 6000, sm_120,
PCIe: 92.6 tok/s baseline, 96.1 tok/s EAGLE-3 with allreduce fusion) is printed with its source
(REFERENCE_SOURCE): it was not measured in this repository. Every run prints what it ran on first
(date, cards and driver, SGLang and the series it carries, the image digest) so its own figures
can replace the reference.

Per configuration it reports the decode rate (tokens after the first one, divided by the time
from the first streamed chunk to the last), the server-wide average EAGLE-3 accept length
(`/server_info`), and whether allreduce fusion was really active: SGLang 0.5.9 ignores
`--enable-flashinfer-allreduce-fusion` silently on sm_120 unless the series lifts its gate, so
the script looks for FlashInfer's workspace line in the server log instead of trusting the flag.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REFERENCE = {"baseline": 92.6, "eagle3+fusion": 96.1}  # tok/s, 8x RTX PRO 6000
REFERENCE_SOURCE = (
    "reference: 8x RTX PRO 6000 (sm_120, PCIe), SGLang 0.5.9 with the series, batch size 1; not measured "
    "in this repository: written with the benchmark (commit 96d7840, 2026-12-02) with no run log, card "
    "driver or image digest kept. Unverified until a run on that hardware replaces it with its own header."
)
DIGEST_ENV = "SGLANG_KIMI_IMAGE_DIGEST"  # the digest of the image this runs in (docker inspect), if given
FUSION_LOG_LINE = "FlashInfer workspace initialized"  # sglang/srt/layers/flashinfer_comm_fusion.py
PROMPTS = [
    "Explain how a B-tree keeps itself balanced when keys are inserted, step by step.",
    "Write a Python function that merges overlapping intervals, with a short explanation.",
    "Summarise the causes of the French Revolution in five paragraphs.",
    "Describe the differences between TCP and UDP and when to use each.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain speculative decoding for large language models to a software engineer.",
    "List the steps to debug a memory leak in a long-running C++ service.",
    "Translate into French and explain the grammar: 'The cat that I saw yesterday was asleep.'",
]


@dataclass(frozen=True)
class Config:
    name: str
    eagle3: bool
    fusion: bool


CONFIGS = [
    Config("baseline", False, False),
    Config("baseline+fusion", False, True),
    Config("eagle3", True, False),
    Config("eagle3+fusion", True, True),
]


@dataclass
class Result:
    config: str
    fusion_flag: bool
    fusion_active: bool | None = None
    decode_tok_s: list[float] = field(default_factory=list)
    accept_length: float | None = None
    error: str | None = None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.decode_tok_s) if self.decode_tok_s else None


# ---------------------------------------------------------------- environment


def gpus() -> list[str]:
    """`name, compute capability` of each visible NVIDIA GPU; empty without driver or GPUs."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def run_header(image_digest: str | None) -> dict[str, object]:
    """What a run ran on, printed and kept with its figures: date, cards and driver, SGLang and
    the series the installed wheel carries, the image digest."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpus": gpus(),
        "driver": _nvidia_smi("driver_version"),
        "sglang": _installed_sglang(),
        "image_digest": image_digest or os.environ.get(DIGEST_ENV) or "unknown (pass --image-digest)",
    }


def header_text(header: dict[str, object]) -> str:
    cards = "; ".join(header["gpus"]) if header["gpus"] else "none found"  # type: ignore[arg-type]
    return (
        f"run: {header['date']}  GPUs: {cards}  driver: {header['driver'] or '?'}\n"
        f"     SGLang: {header['sglang']}  image: {header['image_digest']}"
    )


def _nvidia_smi(field_name: str) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field_name}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return ", ".join(values) if out.returncode == 0 and values else None


def _installed_sglang() -> str:
    """The installed SGLang's version and, for our overlay wheel, the series it carries."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        return "not installed"
    provenance = next((f for f in dist.files or [] if f.name == "sglpatch.json"), None)
    if provenance is None:
        return f"{dist.version} (upstream's wheel)"
    data = json.loads(provenance.read_text())
    return f"{dist.version} (series {str(data.get('series_fingerprint', '?'))[:12]})"


def require_gpus(tp: int) -> list[str]:
    found = gpus()
    if not found:
        _fail(
            f"no NVIDIA GPU here (nvidia-smi missing or lists none); this benchmark needs {tp} "
            f"GPUs: run it on the GPU host, e.g. inside the image"
        )
    if len(found) < tp:
        _fail(f"{len(found)} GPU(s) visible ({'; '.join(found)}), --tp {tp} needs {tp}")
    if importlib.util.find_spec("sglang") is None:
        _fail("SGLang is not installed in this Python: run inside the image")
    return found


def _fail(message: str) -> None:
    print(f"gpu_eagle3: {message}", file=sys.stderr)
    raise SystemExit(2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- one server


def server_command(args, config: Config, port: int) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        args.model,
        "--tp-size",
        str(args.tp),
        "--trust-remote-code",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--mem-fraction-static",
        str(args.mem_fraction_static),
    ]
    if config.eagle3:
        cmd += [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            args.draft,
            "--speculative-num-steps",
            str(args.steps),
            "--speculative-eagle-topk",
            str(args.topk),
            "--speculative-num-draft-tokens",
            str(args.draft_tokens),
        ]
    if config.fusion:
        cmd.append("--enable-flashinfer-allreduce-fusion")
    return cmd + args.extra


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(5)
    raise RuntimeError(f"the server was not healthy after {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """Stop the server's process group (started by us with start_new_session)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 120), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def decode_rate(url: str, model: str, prompt: str, max_new_tokens: int) -> float:
    """Tokens after the first one per second of streaming, for one greedy chat completion."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "temperature": 0,
            "max_tokens": max_new_tokens,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    first = last = None
    tokens = None
    with urllib.request.urlopen(request, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            now = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens")
            if any(
                (c.get("delta") or {}).get(k)
                for c in chunk.get("choices", [])
                for k in ("content", "reasoning_content")
            ):
                first = first or now
                last = now
    if first is None or last is None or not tokens or tokens < 2 or last <= first:
        raise RuntimeError("the server streamed too little to time the decode")
    return (tokens - 1) / (last - first)


def accept_length(url: str) -> float | None:
    with urllib.request.urlopen(f"{url}/server_info", timeout=60) as resp:
        info = json.load(resp)
    values = [s.get("avg_spec_accept_length") for s in info.get("internal_states", [])]
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def run_config(args, config: Config, log_dir: Path) -> Result:
    result = Result(config.name, config.fusion)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = log_dir / f"{config.name}.log"
    cmd = server_command(args, config, port)
    print(f"[{config.name}] {' '.join(cmd)}\n[{config.name}] log: {log_path}", file=sys.stderr, flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(proc, url, args.startup_timeout)
            decode_rate(url, args.model, PROMPTS[0], 32)  # warm-up, not counted
            for prompt in PROMPTS[: args.prompts]:
                rate = decode_rate(url, args.model, prompt, args.max_new_tokens)
                result.decode_tok_s.append(rate)
                print(f"[{config.name}] {rate:.1f} tok/s", file=sys.stderr, flush=True)
            if config.eagle3:
                result.accept_length = accept_length(url)
        except (RuntimeError, OSError, ValueError) as exc:
            result.error = str(exc)
        finally:
            stop(proc)
    result.fusion_active = FUSION_LOG_LINE in log_path.read_text(errors="replace")
    return result


# ---------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    base = next((r.mean for r in results if r.config == "baseline" and r.mean), None)
    head = (
        f"{'config':<16} {'fusion flag':>11} {'fusion active':>13} {'decode tok/s':>12} "
        f"{'vs baseline':>11} {'accept len':>10} {'reference':>9}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        mean = f"{r.mean:.1f}" if r.mean else "-"
        ratio = f"{r.mean / base:.2f}x" if r.mean and base else "-"
        acc = f"{r.accept_length:.2f}" if r.accept_length else "-"
        ref = f"{REFERENCE[r.config]:.1f}" if r.config in REFERENCE else "-"
        active = {True: "yes", False: "no", None: "?"}[r.fusion_active]
        rows.append(
            f"{r.config:<16} {('on' if r.fusion_flag else 'off'):>11} {active:>13} "
            f"{mean:>12} {ratio:>11} {acc:>10} {ref:>9}"
        )
        if r.error:
            rows.append(f"  {r.config}: FAILED: {r.error}")
    return "\n".join([*rows, REFERENCE_SOURCE])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Kimi K2.5 path or Hugging Face id")
    p.add_argument("--draft", required=True, help="EAGLE-3 draft, e.g. lightseekorg/kimi-k2.5-eagle3")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--topk", type=int, default=1)
    p.add_argument("--draft-tokens", type=int, default=4)
    p.add_argument("--mem-fraction-static", type=float, default=0.85)
    p.add_argument(
        "--prompts", type=int, default=len(PROMPTS), choices=range(1, len(PROMPTS) + 1), metavar=f"1..{len(PROMPTS)}"
    )
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument(
        "--configs",
        default=",".join(c.name for c in CONFIGS),
        help="comma-separated subset of: " + ", ".join(c.name for c in CONFIGS),
    )
    p.add_argument("--startup-timeout", type=float, default=3600.0, help="seconds per server start")
    p.add_argument("--log-dir", type=Path, default=Path("gpu_eagle3_logs"))
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--image-digest", help=f"the image's digest, printed with the figures (default: ${DIGEST_ENV})")
    p.add_argument(
        "extra", nargs=argparse.REMAINDER, help="after `--`: more launch_server arguments for every configuration"
    )
    args = p.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]
    names = {c.name: c for c in CONFIGS}
    unknown = [n for n in args.configs.split(",") if n not in names]
    if unknown:
        p.error(f"unknown configuration(s): {', '.join(unknown)}")
    args.configs = [names[n] for n in args.configs.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    found = require_gpus(args.tp)
    print(f"gpu_eagle3: {len(found)} GPU(s): {'; '.join(found)}", file=sys.stderr)
    header = run_header(args.image_digest)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    results = [run_config(args, config, args.log_dir) for config in args.configs]
    print(header_text(header))
    print(table(results))
    if args.json:
        runs = [{**asdict(r), "mean": r.mean} for r in results]
        data = {"run": header, "results": runs, "reference": REFERENCE, "reference_source": REFERENCE_SOURCE}
        args.json.write_text(json.dumps(data, indent=2))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
