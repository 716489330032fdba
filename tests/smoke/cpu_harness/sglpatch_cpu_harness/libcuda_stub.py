"""Build the test-only stub ``libcuda.so.1`` (CPU harness; never shipped).

SGLang's native libraries (``sgl_kernel/*.so``, ``deep_gemm``, ...) are linked against the CUDA
driver, ``libcuda.so.1``, which a machine without an NVIDIA driver does not have: importing them
fails in the dynamic loader before any Python runs. The stub defines every ``cu*`` driver symbol
that those libraries import (read with ``nm -D --undefined-only``) as a function returning
``CUDA_ERROR_NO_DEVICE`` (100). Loaded with ``RTLD_GLOBAL`` before SGLang is imported it satisfies
the loader; any call into it reports "no device", so ``torch.cuda.is_available()`` stays False.

Standard library only: this module runs in the pytest process at set-up (gcc, nm and readelf
from binutils), not in the runtime venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CUDA_ERROR_NO_DEVICE = 100
SONAME = "libcuda.so.1"
# Driver-API functions: cuInit, cuGetProcAddress_v2, ... (not cublas*/cudart's cuda* names,
# which carry a version suffix like "@libcudart.so.12" and live in other libraries).
_DRIVER_SYMBOL = re.compile(r"^cu[A-Z][A-Za-z0-9_]*$")
# Entry points every driver client starts with (cudart dlopens libcuda and asks these first),
# answered "no device" too even if no scanned library imports them.
BASELINE = ("cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuGetProcAddress")


def _needs_libcuda(path: Path) -> bool:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True)
    return out.returncode == 0 and re.search(r"NEEDED.*\[libcuda\.so", out.stdout) is not None


def native_libraries(site_packages: Path) -> list[Path]:
    """The shared objects under ``site_packages`` that are linked against libcuda.so.1."""
    found = []
    for path in sorted(site_packages.rglob("*.so*")):
        if path.is_file() and not path.is_symlink() and _needs_libcuda(path):
            found.append(path)
    return found


def imported_driver_symbols(libraries: list[Path]) -> list[str]:
    symbols: set[str] = set(BASELINE)
    for lib in libraries:
        out = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            name = line.split()[-1] if line.split() else ""
            if _DRIVER_SYMBOL.match(name):
                symbols.add(name)
    return sorted(symbols)


def stub_source(symbols: list[str]) -> str:
    lines = [
        "/* Test-only stub of the CUDA driver (sglpatch CPU harness). Generated; do not ship. */",
        f"#define CUDA_ERROR_NO_DEVICE {CUDA_ERROR_NO_DEVICE}",
    ]
    lines += [f"int {name}(void) {{ return CUDA_ERROR_NO_DEVICE; }}" for name in symbols]
    return "\n".join(lines) + "\n"


def build_stub(site_packages: Path, out_dir: Path, venv_key: str) -> Path:
    """Build (once per venv) and return ``out_dir/<key>/libcuda.so.1`` for the native libraries in
    ``site_packages``. ``venv_key`` identifies the venv's contents (its completeness stamp); the key
    also hashes this generator, so a changed venv or generator gets a new stub."""
    key = hashlib.sha256((venv_key + Path(__file__).read_text()).encode()).hexdigest()[:16]
    target = out_dir / key / SONAME
    if target.is_file():
        return target
    for tool in ("gcc", "nm", "readelf"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"the CPU harness needs '{tool}' to build its stub libcuda.so.1 (apt-get install gcc binutils)"
            )
    libraries = native_libraries(site_packages)
    if not libraries:
        raise RuntimeError(f"no library under {site_packages} links libcuda.so.1; is this SGLang's runtime venv?")
    source = stub_source(imported_driver_symbols(libraries))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "libcuda_stub.c"
        src.write_text(source)
        built = Path(tmp) / SONAME
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", f"-Wl,-soname,{SONAME}", "-o", str(built), str(src)],
            check=True,
            capture_output=True,
            text=True,
        )
        os.replace(src, target.parent / "libcuda_stub.c")
        os.replace(built, target)
    return target
