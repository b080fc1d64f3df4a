"""Every tested executorch and torch pair runs the smoke session: a fresh venv each, the built wheel installed with
that pair, then in a project outside the checkout an export, a counted run on the emulated target, a gated verdict
and an LLM prefill and decode.

Why: pyproject.toml admits ranges of executorch and torch, and most of what pytest-sme2 does depends on the
executorch version (the runners built against its wheel, the kernel kit, ETDump and ``.pte`` facts, the LLM export
path). A range is honest only where every pair in it was run. The pairs are one table,
``pytest_sme2/system/version_pairs.py`` (``TESTED_PAIRS``), which ``pytest-sme2 doctor`` also reads; this script
loads it by path, without torch. Before a release and whenever the range or a dependency changes; not in CI
(minutes per pair, most of it pip, the exports and the first aarch64 runner build of a version).

The session copies the checkout's models/, baselines/ and two perf tests (``SMOKE_TESTS``) into a temp project and
runs them as a user would, with ``--sme2-target=emulated``: a test passes, its profiles are counted on the emulated
target and judged against the committed baselines (recorded on executorch 1.5.1, so a pair with another version may
fail the gate: that is an upgrade the gate explains). Helpers are .ci/wheel_smoke.py's.

    python .ci/version_matrix.py                 # every pair; exit 1 if any fails
    python .ci/version_matrix.py --only 1.5.1    # the pairs of one executorch version
    TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu python .ci/version_matrix.py   # torch's CPU build
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
import time
from pathlib import Path

from built_wheel import ROOT, build_wheel, scratch_folder
from wheel_smoke import SmokeFailure, _run, check_newest_session, fresh_venv

# One counted CNN test (export, SME2 on and off counted, gated) and the LLM's prefill and decode (gated too).
SMOKE_TESTS = (
    "perf_tests/test_toy_cnn.py::test_toy_cnn_is_fully_delegated",
    "perf_tests/test_tiny_llama.py::test_llm_prefill_and_decode_sme2",
)
PROJECT_INI = """\
[tool.pytest.ini_options]
sme2_model_dirs = ["models"]
sme2_cache_dir = ".sme2/cache"
sme2_artifacts_dir = ".sme2/artifacts"
"""


def tested_pairs() -> tuple:
    """TESTED_PAIRS of pytest_sme2/system/version_pairs.py, loaded by path (it imports nothing)."""
    path = ROOT / "pytest_sme2" / "system" / "version_pairs.py"
    spec = importlib.util.spec_from_file_location("version_pairs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple's class needs its module registered while it is made
    spec.loader.exec_module(module)
    return module.TESTED_PAIRS


def _project(project: Path) -> None:
    """The temp project: the checkout's models, baselines, the perf suite's conftest and the smoke tests' files."""
    shutil.copytree(ROOT / "models", project / "models", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "baselines", project / "baselines")
    (project / "perf_tests").mkdir()
    for name in {"conftest.py", *(Path(test.split("::")[0]).name for test in SMOKE_TESTS)}:
        shutil.copy2(ROOT / "perf_tests" / name, project / "perf_tests" / name)
    (project / "pyproject.toml").write_text(PROJECT_INI)


def smoke_pair(work: Path, wheel: Path, executorch: str, torch: str) -> None:
    """The smoke session of one pair in ``work``; SmokeFailure at the first step that fails."""
    venv, project = work / "venv", work / "project"
    bin_, env = fresh_venv(venv, wheel, f"torch=={torch}", f"executorch=={executorch}")
    versions = _run(
        [
            str(bin_ / "python"),
            "-c",
            "import executorch.version, torch; print(executorch.version.__version__, " "torch.__version__)",
        ],
        work,
        env,
        "versions",
    ).split()
    if [v.split("+")[0] for v in versions] != [executorch, torch]:
        raise SmokeFailure(f"the venv has executorch {versions[0]} and torch {versions[1]}, not {executorch}, {torch}")
    project.mkdir()
    _project(project)
    _run([str(bin_ / "pytest-sme2"), "setup-emulation"], project, env, "emulated target")
    _run(
        [str(bin_ / "pytest"), *SMOKE_TESTS, "-m", "sme2", "--sme2-target=emulated", "-p", "no:cacheprovider", "-rs"],
        project,
        env,
        "smoke tests",
    )
    check_newest_session(project, tests=len(SMOKE_TESTS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only the pairs of this executorch version (1.5.1)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (venvs, projects) and say where")
    args = parser.parse_args(argv)
    pairs = [pair for pair in tested_pairs() if args.only in (None, pair.executorch)]
    if not pairs:
        parser.error(f"--only {args.only}: no tested pair has executorch {args.only}")
    started = time.monotonic()
    failed = []
    with scratch_folder("version-matrix-", args.keep, "version_matrix") as tmp:
        (tmp / "wheel").mkdir()
        wheel = build_wheel(tmp / "wheel")
        for pair in pairs:
            name = f"executorch {pair.executorch} + torch {pair.torch}"
            print(f"{name}:", flush=True)
            work = tmp / f"executorch-{pair.executorch}-torch-{pair.torch}"
            work.mkdir()
            from_ = time.monotonic()
            try:
                smoke_pair(work, wheel, pair.executorch, pair.torch)
            except SmokeFailure as exc:
                print(f"{name}: FAILED ({time.monotonic() - from_:.0f} s)")
                print(re.sub(r"^", "    ", str(exc), flags=re.M))
                failed.append(name)
            else:
                print(f"{name}: smoke session passed ({time.monotonic() - from_:.0f} s)")
    print(
        f"version_matrix: {len(pairs) - len(failed)} of {len(pairs)} executorch and torch pairs pass the smoke "
        f"session ({time.monotonic() - started:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
