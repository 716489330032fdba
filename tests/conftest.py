"""Shared fixtures: the real SGLang 0.5.9 runtime (``runtime``), the tiny generated models, and a
real Docker engine with the stand-in base image (``docker_engine``, ``standin_base``).

Any test that uses ``runtime`` is marked ``slow`` automatically (the runtime venv is ~11 GB, built
once, several minutes cold); ``pytest -m "not slow"`` runs the fast set alone.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # `import sglang_runtime` from any test, any import mode
    sys.path.insert(0, str(TESTS_DIR))

import sglang_runtime  # noqa: E402
from helpers import load_module  # noqa: E402

model_specs = load_module("sglpatch_test_model_specs", TESTS_DIR / "models" / "specs.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "lines(*names): run the runtime tests only on these lines")
    config.addinivalue_line(
        "markers",
        "sglang(specifier): a runtime test that follows the code of the "
        "SGLang releases in the specifier, e.g. '<0.5.21'",
    )
    config.addinivalue_line(
        "markers",
        "patch(number, absent=False): a runtime test of one patch: runs "
        "on the lines whose series carries it (absent=True: lacks it)",
    )


@functools.cache
def _line_facts(line: str) -> tuple[str, tuple[str, ...]]:
    """A line's SGLang version and patch names, read once per session."""
    from sglpatch.queue.line import find_line
    from sglpatch.queue.series import read_series_names
    from sglpatch.upstream.pin import read_pin

    root = find_line(sglang_runtime.REPO_ROOT, line).root
    return read_pin(root).version, tuple(read_series_names(root))


def _line_applies(item, line: str) -> bool:
    from packaging.specifiers import SpecifierSet

    version, patches = _line_facts(line)
    lines = item.get_closest_marker("lines")
    if lines and line not in lines.args:
        return False
    release = item.get_closest_marker("sglang")
    if release and version not in SpecifierSet(release.args[0]):
        return False
    patch = item.get_closest_marker("patch")
    if patch:
        carried = any(name.startswith(f"{patch.args[0]}-") for name in patches)
        return carried != patch.kwargs.get("absent", False)
    return True


def pytest_collection_modifyitems(config, items):
    kept, deselected = [], []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "runtime" in fixtures:
            item.add_marker(pytest.mark.slow)
        if "docker_engine" in fixtures:
            item.add_marker(pytest.mark.image)
        line = getattr(getattr(item, "callspec", None), "params", {}).get("runtime")
        (kept if line is None or _line_applies(item, line) else deselected).append(item)
    if deselected:  # a patch's runtime test on a line without that patch does not exist
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(scope="session")
def docker_engine(request):
    """A real Docker engine (tests/docker_engine.py): Debian's docker.io installed and dockerd
    started by this set-up when needed, stopped at the end only if started here. Where none can
    start, every test that needs it fails with the one-line cause (never a skip)."""
    import docker_engine as engines

    progress = progress_printer(request.config, "docker")
    try:
        engine = engines.ensure_engine(progress)
    except engines.EngineError as exc:
        pytest.fail(f"no Docker engine for the image tests: {exc}", pytrace=False)
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def standin_base(request, docker_engine, runtime, tmp_path_factory):
    """The stand-in for upstream's CUDA 13 base image (tests/image_standin.py), built once. When
    registry tests are selected, a registry starts being seeded with it at once, in the
    background (``seeded_registry``)."""
    import docker_engine as engines
    import image_standin
    import registry_server

    from sglpatch.upstream.source import release_artifact

    pin = runtime.pin
    # the sdist where the release has one (editable, as upstream's image); else the cp311 wheel
    sglang = release_artifact(pin.version, "sdist", pin) or release_artifact(pin.version, "wheel", pin)
    try:
        ref = image_standin.standin_base(
            docker_engine,
            cache=sglang_runtime.cache_dir(),
            upstream_tag=pin.tag,
            requirements=runtime.requirements,
            sglang=Path(sglang),
            stub_libcuda=runtime.stub_libcuda or runtime.build_stub(),
            progress=progress_printer(request.config, "docker"),
        )
    except engines.EngineError as exc:
        pytest.fail(f"the stand-in base image: {exc}", pytrace=False)
    job = None
    # seeding takes minutes: only when a selected test needs it, and for this line
    if any(
        "seeded_registry" in getattr(item, "fixturenames", ()) and f"[{runtime.line.name}]" in item.nodeid
        for item in request.session.items
    ):
        job = registry_server.SeedJob(
            docker_engine,
            ref,
            tmp_path_factory.mktemp(f"registry-{runtime.line.name}"),
            progress=progress_printer(request.config, "registry"),
        )
    _SEEDS[ref] = job
    yield ref
    if job is not None:
        job.stop()


_SEEDS: dict = {}


@pytest.fixture(scope="session")
def seeded_registry(standin_base):
    """A real registry on 127.0.0.1 that already holds the stand-in base's layers (seeded in the
    background since the base was built; tests/registry_server.py)."""
    import docker_engine as engines

    job = _SEEDS.get(standin_base)
    if job is None:
        pytest.fail("the registry was not seeded: no registry test was collected", pytrace=False)
    try:
        return job.wait()
    except engines.EngineError as exc:
        pytest.fail(str(exc), pytrace=False)


def progress_printer(config, prefix: str):
    """A ``progress(message)`` that prints on the terminal past pytest's capture: long set-up
    steps (venv, engine, images) say what they do while they do it."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capman = config.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        line = f"[{prefix}] {message}"
        if reporter is None or capman is None:
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()
            return
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)

    return progress


@pytest.fixture(scope="session", params=sglang_runtime.line_names())
def runtime(request):
    """The SGLang runtime of each maintained line (production: 0.5.9, latest: 0.5.23), one after
    the other: ``runtime.run(script, *, variant, timeout=600)`` and friends (see
    tests/sglang_runtime.py). Built on first use, reused afterwards. ``@pytest.mark.lines`` and
    ``@pytest.mark.patch`` limit a test to some lines."""
    rt = sglang_runtime.Runtime(
        progress=progress_printer(request.config, f"sglang runtime {request.param}"), line=request.param
    )
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
    return (
        _model(runtime, "kimi_k25", model_specs.KIMI_K25_ALWAYS_0),
        _model(runtime, "eagle3_draft", model_specs.EAGLE3_DRAFT_ALWAYS_0),
    )


@pytest.fixture(scope="session")
def kimi_k25_8_pair(runtime) -> tuple[Path, Path]:
    """An 8-layer random KimiK25 target and its EAGLE-3 draft (ids [0, 1, 2] under eagle_config):
    SGLang's default capture layers [2, 4, 5] are distinct there, as on real targets."""
    return (
        _model(runtime, "kimi_k25", model_specs.KIMI_K25_8),
        _model(runtime, "eagle3_draft", model_specs.EAGLE3_DRAFT_8),
    )


@pytest.fixture(scope="session")
def always0_pair_8(runtime) -> tuple[Path, Path]:
    """The 8-layer pair with final norms zeroed (both always predict token 0); the EAGLE-3
    capture-layer tests derive their layer-probe pair from it."""
    return (
        _model(runtime, "kimi_k25", model_specs.KIMI_K25_8_ALWAYS_0),
        _model(runtime, "eagle3_draft", model_specs.EAGLE3_DRAFT_8_ALWAYS_0),
    )


@pytest.fixture(scope="session")
def patched(tmp_path_factory):
    """``patched(line)``: the files the line's series touches, patched, in a scratch directory
    (the fast behaviour tests run the code the patches add from there: tests/patch_code.py)."""
    from patch_code import patched_files

    from sglpatch.queue.line import find_line
    from sglpatch.queue.series import read_series
    from sglpatch.upstream.pin import read_pin
    from sglpatch.upstream.source import pristine_tree

    made = {}

    def tree(line: str) -> Path:
        if line not in made:
            root = find_line(TESTS_DIR.parent, line).root
            pin = read_pin(root)
            made[line] = patched_files(
                pristine_tree(pin.version, pin),
                [p.path for p in read_series(root).patches],
                tmp_path_factory.mktemp(f"patched-{line}"),
            )
        return made[line]

    return tree
