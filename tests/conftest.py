"""Shared fixtures: the real SGLang 0.5.9 runtime (``runtime``) and the tiny generated models.

Any test that uses ``runtime`` is marked ``slow`` automatically (the runtime venv is ~11 GB, built
once, several minutes cold); ``pytest -m "not slow"`` runs the fast set alone.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # `import sglang_runtime` from any test, any import mode
    sys.path.insert(0, str(TESTS_DIR))

import sglang_runtime  # noqa: E402


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


model_specs = _load("sglpatch_test_model_specs", TESTS_DIR / "models" / "specs.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "runtime" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def runtime(request):
    """SGLang 0.5.9's runtime: ``runtime.run(script, *, variant, timeout=600)`` and friends
    (see tests/sglang_runtime.py). Built on first use, reused afterwards."""
    config = request.config
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capman = config.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        line = f"[sglang runtime] {message}"
        if reporter is None or capman is None:
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()
            return
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)

    rt = sglang_runtime.Runtime(progress=progress)
    try:
        rt.ensure()
        yield rt
    finally:
        sglang_runtime.kill_all_active()


def _model(runtime, kind: str, spec: dict) -> Path:
    return model_specs.ensure_model(runtime, kind, spec, sglang_runtime.cache_dir())


@pytest.fixture(scope="session")
def kimi_k25_model(runtime) -> Path:
    """Tiny random KimiK25 target (DeepseekV3 MLA text model, 4 experts, MoonViT tower)."""
    return _model(runtime, "kimi_k25", model_specs.KIMI_K25)


@pytest.fixture(scope="session")
def eagle3_draft_model(runtime) -> Path:
    """Tiny random EAGLE-3 draft for ``kimi_k25_model``; aux layer ids differ from the defaults."""
    return _model(runtime, "eagle3_draft", model_specs.EAGLE3_DRAFT)


@pytest.fixture(scope="session")
def always0_pair(runtime) -> tuple[Path, Path]:
    """Constructed (target, draft) pair that both always predict token 0: every draft accepted."""
    return (_model(runtime, "kimi_k25", model_specs.KIMI_K25_ALWAYS_0),
            _model(runtime, "eagle3_draft", model_specs.EAGLE3_DRAFT_ALWAYS_0))
