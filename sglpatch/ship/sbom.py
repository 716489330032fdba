"""What is inside the image: a CycloneDX SBOM of its Python environment and a known-vulnerability
report of the same packages, written next to the image and named by its image ID.

- The SBOM is made by CycloneDX's own generator (`cyclonedx-py environment`), run **in the built
  image** against the image's Python: its pure-Python wheels (`docker/sbom-requirements.txt`,
  pinned) are installed into the cache once and mounted read-only into a throw-away container with
  no network, so nothing is added to the image and nothing is guessed from outside it.
- The report is `pip-audit` against PyPI's advisory data for exactly the SBOM's packages. Our own
  `sglang` carries a local version (`0.5.9+kimi.2`) that PyPI does not know; it is audited as the
  upstream release it patches, since the series fixes no advisory.

A finding never fails a local build: the counts are printed and the report is the record.
docs/deploy.md ("What is inside") states the release policy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError

SBOM_REQUIREMENTS = Path("docker") / "sbom-requirements.txt"
MOUNT = "/opt/sglpatch-sbom"
CYCLONEDX_SPEC = "1.6"
_RUN_IN_IMAGE = (
    f"import sys; sys.path.insert(0, {MOUNT!r}); "
    "sys.argv = ['cyclonedx-py', 'environment', '--no-validate', '--output-reproducible', "
    f"'--of', 'JSON', '--sv', {CYCLONEDX_SPEC!r}, sys.executable]; "
    "from cyclonedx_py._internal.cli import run; sys.exit(run())"
)


def generator(repo_root: Path) -> Path:
    """The pinned CycloneDX generator's wheels, installed once per requirements file content."""
    requirements = repo_root / SBOM_REQUIREMENTS
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    target = cache_dir() / "tools" / f"cyclonedx-{key}"
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".cyclonedx-"))
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "any",
                "--implementation",
                "py",
                "--abi",
                "none",
                "--target",
                str(tmp),
                "-r",
                str(requirements),
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            said = (out.stderr or out.stdout).strip().splitlines()
            raise UserError(
                f"installing the SBOM generator from {SBOM_REQUIREMENTS} failed: "
                f"{said[-1] if said else out.returncode}",
                "check the network to PyPI, then rerun",
            )
        (tmp / ".complete").write_text(key + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)  # whole or absent: an interrupted install is never used
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def make_sbom(client: str, ref: str, env: dict[str, str], tool: Path, image_id: str, labels: dict[str, str]) -> dict:
    """The image's Python environment as CycloneDX, its main component the image itself."""
    out = subprocess.run(
        [
            client,
            "run",
            "--rm",
            "--network",
            "none",
            "--label",
            "sglpatch.sbom=1",
            "-v",
            f"{tool}:{MOUNT}:ro",
            "--entrypoint",
            "python3",
            ref,
            "-c",
            _RUN_IN_IMAGE,
        ],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        bom = json.loads(out.stdout) if out.returncode == 0 else None
    except json.JSONDecodeError:
        bom = None
    if not bom or "components" not in bom:
        said = (out.stderr or out.stdout).strip().splitlines()
        raise UserError(
            f"the SBOM generator failed in {ref}: {said[-1] if said else out.returncode}",
            "the image's python3 must run; see docs/deploy.md (What is inside)",
        )
    repo, _, tag = ref.rpartition(":")
    bom["metadata"]["component"] = {
        "type": "container",
        "bom-ref": image_id,
        "name": repo,
        "version": tag,
        "hashes": [{"alg": "SHA-256", "content": image_id.removeprefix("sha256:")}],
        "properties": [{"name": f"oci:label:{key}", "value": value} for key, value in sorted(labels.items())],
    }
    return bom


def audit_requirements(bom: dict) -> tuple[list[str], dict[str, str]]:
    """``name==version`` for every PyPI component; a local version is audited as its public one."""
    lines, audited_as = [], {}
    for component in bom.get("components", []):
        purl = component.get("purl", "")
        if not purl.startswith("pkg:pypi/"):
            continue
        name, version = component["name"], component["version"]
        public = version.split("+", 1)[0]
        if public != version:
            audited_as[name] = public
        lines.append(f"{name}=={public}")
    return sorted(set(lines)), audited_as


def audit(bom: dict, cache: Path | None = None) -> dict:
    """pip-audit's JSON for the SBOM's packages; when it cannot run, a report saying why."""
    requirements, audited_as = audit_requirements(bom)
    with tempfile.TemporaryDirectory(prefix="sglpatch-audit-") as tmp:
        listing, result = Path(tmp) / "requirements.txt", Path(tmp) / "audit.json"
        listing.write_text("\n".join(requirements) + "\n")
        argv = [
            sys.executable,
            "-m",
            "pip_audit",
            "--requirement",
            str(listing),
            "--no-deps",
            "--disable-pip",
            "--progress-spinner",
            "off",
            "--format",
            "json",
            "--output",
            str(result),
        ]
        if cache is not None:
            argv += ["--cache-dir", str(cache)]
        out = subprocess.run(argv, capture_output=True, text=True)
        found = json.loads(result.read_text()) if result.is_file() and result.stat().st_size else None
    if out.returncode not in (0, 1) or found is None:  # 1: vulnerabilities found
        said = (out.stderr or out.stdout).strip().splitlines()
        return {
            "audited": False,
            "error": said[-1] if said else f"pip-audit exited {out.returncode}",
            "packages": len(requirements),
        }
    answered = [d for d in found.get("dependencies", []) if not d.get("skip_reason")]
    if requirements and not answered:  # e.g. a PyPI proxy that serves no per-release JSON
        first = found["dependencies"][0]["skip_reason"]
        return {
            "audited": False,
            "packages": len(requirements),
            **found,
            "error": f"PyPI's advisory data answered for none of the {len(requirements)} packages ({first})",
        }
    return {"audited": True, "source": "PyPI advisory data (pip-audit)", "audited_as": audited_as, **found}


def summary(report: dict) -> str:
    if not report.get("audited"):
        return f"not audited ({report.get('error')})"
    dependencies = report.get("dependencies", [])
    vulnerable = [d for d in dependencies if d.get("vulns")]
    count = sum(len(d["vulns"]) for d in vulnerable)
    skipped = sum(1 for d in dependencies if d.get("skip_reason"))
    return (
        f"{count} known vulnerabilit{'y' if count == 1 else 'ies'} in {len(vulnerable)} of "
        f"{len(dependencies) - skipped} audited packages ({skipped} unknown to PyPI)"
    )


def record(
    root: Path,
    repo_root: Path,
    client: str,
    ref: str,
    env: dict[str, str],
    image_id: str,
    labels: dict[str, str],
    say=print,
) -> dict:
    """Write ``<line>/dist/image/<id>.cdx.json`` and ``<id>.audit.json``; return their paths and counts."""
    bom = make_sbom(client, ref, env, generator(repo_root), image_id, labels)
    report = audit(bom, cache_dir() / "pip-audit")
    folder = root / "dist" / "image"
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^0-9a-z]", "-", image_id)
    paths = {"sbom": folder / f"{stem}.cdx.json", "audit": folder / f"{stem}.audit.json"}
    for key, data in (("sbom", bom), ("audit", report)):
        tmp = paths[key].with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, paths[key])
    say(f"SBOM: {len(bom['components'])} components -> {paths['sbom']}")
    say(f"vulnerabilities: {summary(report)} -> {paths['audit']}")
    return {
        "sbom": str(paths["sbom"]),
        "audit": str(paths["audit"]),
        "components": len(bom["components"]),
        "audit_summary": summary(report),
    }
