"""Shared fixtures for the plugin's own tests."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Generator, Iterator

import executorch.exir  # noqa: F401,E402

# pytester's in-process runs drop every module first imported inside them; torch and executorch are C
# extensions that cannot be imported twice in one process, so what export needs is imported here, once,
# before any inner run. So is what every inner session imports lazily (the gate's statistics, torch.export's
# tracing passes, the Profile's dict form): imported again in each in-process session, it cost about 2 s a
# session (issue 25: measured with an import hook around one session).
import pandas.core.methods.to_dict  # noqa: F401,E402
import pytest
import scipy.stats  # noqa: F401,E402
import torch  # noqa: F401,E402
import torch._export.passes.add_runtime_assertions_for_constraints_pass  # noqa: F401,E402
import torch._export.passes.collect_tracepoints_pass  # noqa: F401,E402
import torch._export.passes.replace_autocast_with_hop_pass  # noqa: F401,E402
import torch._export.passes.replace_set_grad_with_hop_pass  # noqa: F401,E402
import torch.export._trace  # noqa: F401,E402
import torch.export._unlift  # noqa: F401,E402
import torch.fx.experimental.validator  # noqa: F401,E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: F401,E402
from executorch.backends.xnnpack.quantizer import xnnpack_quantizer  # noqa: F401,E402
from executorch.devtools import backend_debug  # noqa: F401,E402
from torchao.quantization.pt2e import quantize_pt2e  # noqa: F401,E402

REPO = Path(__file__).resolve().parent.parent

# pytester points HOME at each test's folder; keep the runner/qemu cache where it
# really is (built once by `pytest-sme2 setup-emulation` / build-runner).
import os  # noqa: E402

from pytest_sme2.run.native.build import cache_root  # noqa: E402

os.environ.setdefault("PYTEST_SME2_RUNNER_CACHE", str(cache_root()))

TINY_MODEL = '''
"""A tiny conv + linear model for plugin tests."""
import torch

def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)
    ).eval()

def get_example_inputs():
    return (torch.ones(1, 3, 16, 16),)
'''


def export_tiny_both_ways(root: Path) -> Path:
    """``root``/tiny.py (the tiny model) exported with XNNPACK and without into ``root``/cache by the real export;
    returns ``root``: the project folder the cache commands' tests work on."""
    from pytest_sme2 import Recipe
    from pytest_sme2.export.export import export
    from pytest_sme2.model.registry import ModelRegistry

    (root / "tiny.py").write_text(TINY_MODEL)
    registry = ModelRegistry()
    registry.register("tiny", str(root / "tiny.py"))
    for recipe in (Recipe(), Recipe(partitioner="none")):
        export(registry.get("tiny"), recipe, root / "cache")
    return root


# On an executorch pair that profiles no run (1.4.1: pytest_sme2/system/version_pairs.py) a test that failed with
# exactly one of the two limitations pytest-sme2 names for it (no runtime for the runner, no ETDump from the binding)
# is reported skipped with that text. Never on a pair that profiles (1.5.1), and any other failure stays one.
_UNPROFILED_PAIR_LIMIT = re.compile(
    r"executorch [0-9.]+'s (wheel ships no C\+\+ runtime libraries to build pytest-sme2's runner|Python binding wrote "
    r"no ETDump)[^;\n]*"
)


def _pair_profiles() -> bool:
    from helpers_versions import _RELEASE

    from pytest_sme2.system.version_pairs import pair_for

    return _RELEASE is None or pair_for(_RELEASE).profiles


_PAIR_PROFILES = _pair_profiles()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if _PAIR_PROFILES or not report.failed:
        return report
    text = report.longreprtext + "".join(content for _, content in report.sections)
    limit = _UNPROFILED_PAIR_LIMIT.search(text)
    if limit is not None:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {limit.group(0)}")
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of a file that share a module-scoped fixture of that file run in one xdist worker (``--dist
    loadgroup``), so the fixture (an export, a counted mobilenet run: tens of seconds) is built once, not once
    in each worker (issue 25). Tests already in a group keep theirs: xdist would join the two names."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        if any(defs[-1].scope == "module" and defs[-1].baseid == module for defs in definitions):
            item.add_marker(pytest.mark.xdist_group(module))


# The pytest plugins an inner session may need: this one and those its tests use (-n, --html, --benchmark-*).
INNER_SESSION_PLUGIN_DISTS = frozenset(
    {"pytest-sme2", "pytest-xdist", "pytest-benchmark", "pytest-html", "pytest-metadata"}
)


def inner_session_plugins() -> list[str]:
    """The modules of the installed ``pytest11`` entry points whose distribution is in INNER_SESSION_PLUGIN_DISTS,
    in entry-point order. Read from the installed metadata, not listed by hand, so a new plugin module of one of
    those distributions is loaded too, and a plugin of any other one (hypothesis, hydra, anyio, kgb: installed
    with executorch's dependencies) is not."""
    from importlib.metadata import entry_points

    return [
        ep.value
        for ep in entry_points(group="pytest11")
        if ep.dist is not None and ep.dist.name in INNER_SESSION_PLUGIN_DISTS
    ]


_INNER_PLUGINS = ",".join(inner_session_plugins())
# What every inner session's environment holds (the fixture below; module-scoped sessions set it themselves).
INNER_SESSION_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_PLUGINS": _INNER_PLUGINS}


@pytest.fixture(autouse=True)
def _inner_sessions_load_only_their_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest session started by a test (pytester, bisect's steps, the check command, the interrupt tests)
    loads only the plugins it needs: entry-point autoloading off, the needed ones named in PYTEST_PLUGINS.

    Why: every installed ``pytest11`` plugin is imported at each session start; hypothesis's (0.8 s), hydra's
    (0.3 s), anyio's and kgb's cost about 1.5 s of the 2.6 s a bare ``pytest --co`` takes here, paid by every
    subprocess session of `make test` (issue 25). Environment variables, unlike PYTEST_ADDOPTS (which pytester
    clears and the gate's own tests remove), reach every inner session. Under this the plugin is registered as
    ``pytest_sme2.plugin``, not ``sme2`` (the repository conftest accepts both), and an inner ``-p xdist``
    would register xdist a second time under its entry-point name (pytest refuses that): inner sessions
    use ``-n`` alone."""
    for name, value in INNER_SESSION_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def _no_baseline_gate_in_inner_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs (pytester, in-process or subprocess) have no stored baselines.

    The gate fails a test without a baseline by default, so every inner run gets
    --sme2-no-baselines through PYTEST_ADDOPTS (set after pytester, which clears
    it); tests/plugin/test_baseline_plugin.py, which tests the gate, removes it again.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        monkeypatch.setenv("PYTEST_ADDOPTS", "--sme2-no-baselines")


@pytest.fixture(autouse=True)
def _torch_trace_log_stays_private(request: pytest.FixtureRequest) -> Iterator[None]:
    """torch's "torch.__trace" log never propagates (torch sets it so); a test that leaves it propagating
    makes every later export in this process print hundreds of DEBUG records into pytest's captured log
    (seen once in CI, order-dependent). Put it back after each test and say which test changed it."""
    import logging
    import warnings

    yield
    trace = logging.getLogger("torch.__trace")
    if trace.propagate:
        trace.propagate = False
        warnings.warn(f"{request.node.nodeid} left the torch.__trace log propagating; set back", stacklevel=1)


@pytest.fixture(scope="session")
def shared_export_cache() -> Path:
    """The checkout's own export and result cache, ``.sme2/cache``: the folder `make perf` (the perf suite's
    default ``sme2_cache_dir``) uses, shared by this run's xdist workers, by later runs and by the perf suite.

    Why there and not in a temporary folder: both caches are keyed by the content of everything that can change
    their answer (the traced program, inputs, recipe, versions and pytest-sme2's export code; the program,
    runner, libraries, qemu, CPU settings, run settings and the package's code for a counted run), which
    tests/export and tests/run prove ingredient by ingredient, so an entry made by a test is the answer any
    later session would compute. Each model is exported once per run, not once per worker and per test file
    (issue 25: the bundled mobilenet was exported seven times in one `make test`); a second `make test` with no
    change exports nothing again; and CI's `make perf` after `make test` re-uses the bundled models' exports
    and counted runs the tests made. Two workers wanting one entry export it once: the cache locks each key.
    Tests that check a miss, a fresh export or a damaged entry use a folder of their own. Delete
    ``.sme2/cache`` for a run with nothing cached."""
    cache = REPO / ".sme2" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


@pytest.fixture(scope="module")
def exported_toy_cnn(shared_export_cache: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The bundled toy_cnn, fp32 XNNPACK, from the shared export cache (an ExportedModel)."""
    from pytest_sme2 import Recipe
    from pytest_sme2.measure.session import Settings, Sme2Session

    session = Sme2Session(
        Settings(target="host", cache_dir=shared_export_cache, session_dir=tmp_path_factory.mktemp("export-artifacts"))
    )
    session.registry.register_dir(REPO / "models")
    return session.export("toy_cnn", Recipe())


@pytest.fixture(scope="module")
def bundled_sessions(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path):  # noqa: ANN201
    """Factory ``start(target) -> Sme2Session`` of sessions with the bundled models registered and the shared
    export cache, each closed when the module's tests are done."""
    from pytest_sme2.measure.session import Settings, Sme2Session

    made: list = []

    def start(target: str):  # noqa: ANN202
        root = tmp_path_factory.mktemp(f"bundled-{target}")
        session = Sme2Session(Settings(target=target, cache_dir=shared_export_cache, session_dir=root / "run"))
        session.registry.register_dir(REPO / "models")
        made.append(session)
        return session

    yield start
    for session in made:
        session.close()


def quick_host_ini(cache: Path, *extra: str) -> str:
    """A pytest.ini for inner sessions that only need a few real runs of small models on the host target:
    three timed runs, no warmup, one round (history and bisect count sessions and verdicts, not latency)."""
    lines = [
        "[pytest]",
        "sme2_model_dirs = models",
        "sme2_target = host",
        f"sme2_cache_dir = {cache}",
        "sme2_runs = 3",
        "sme2_warmup = 0",
        "sme2_max_rounds = 1",
        "sme2_baseline_replicas = 3",
        "sme2_replicas = 1",
        *extra,
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def tiny_model_text(request: pytest.FixtureRequest) -> str:
    """The tiny model's source with a comment naming the test. The export-cache key is the traced program's
    content, which a comment does not change: a test that needs a fresh export uses its own cache folder."""
    return TINY_MODEL + f"\n# {request.node.name}\n"


@pytest.fixture
def sme2_project(pytester: pytest.Pytester, shared_export_cache: Path) -> pytest.Pytester:
    """A pytester project with a models/ folder holding ``tiny`` and the plugin configured."""
    models = pytester.mkdir("models")
    (models / "tiny.py").write_text(TINY_MODEL)
    pytester.makeini(
        textwrap.dedent(
            f"""
            [pytest]
            sme2_model_dirs = models
            sme2_target = host
            sme2_cache_dir = {shared_export_cache}
            sme2_runs = 5
            sme2_warmup = 1
            # Exact run counts in these tests: no extra rounds when this busy machine disturbs runs
            # (tests/measure/test_runner_rounds.py tests those).
            sme2_max_rounds = 1
            # Baseline updates measure the fewest processes the gate accepts (each a host worker start).
            sme2_baseline_replicas = 3
            # Checks of one process: these tests are about the gate's flow, and their 5-run baselines of a 30 us
            # model are noisy enough that auto (the default) would measure ten (test_check_command tests auto).
            sme2_replicas = 1
            # Every emulated run really emulated: the export cache is shared by the whole suite, and these tests
            # are about what a run does; tests/run/test_result_cache.py turns the result cache on (-o).
            sme2_fresh = true
            filterwarnings = ignore
            """
        )
    )
    return pytester
