"""Build the native runner and the SME2-masking preload library, cached.

The runner is built with CMake (>= 3.28; the PyPI ``cmake`` package is a
dependency) against the installed executorch wheel's C++ runtime, once per
executorch version, architecture and runner source, under
``$PYTEST_SME2_RUNNER_CACHE`` (default ``~/.cache/pytest-sme2/runners``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from ..errors import RunnerError, UsageError

SOURCE_DIR = Path(__file__).resolve().parent
RUNNER_SOURCES = ("sme2_runner.cpp", "CMakeLists.txt")
MASK_SOURCE = "sme2_mask.c"
RUNNER_NAME = "sme2_runner"
MASK_NAME = "libsme2_mask.so"
ARCHES = ("host",)


def cache_root() -> Path:
    configured = os.environ.get("PYTEST_SME2_RUNNER_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-sme2" / "runners"


def executorch_prefix() -> Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise RunnerError("executorch is not installed; `pip install executorch==1.5.1` first")
    return Path(list(spec.submodule_search_locations)[0])


def _executorch_version() -> str:
    import executorch.version

    return executorch.version.__version__


def _sources_hash(names: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in names:
        digest.update((SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:12]


def find_cmake() -> str:
    """A CMake >= 3.28: the PyPI package's first, then PATH."""
    candidates = []
    try:
        import cmake  # the PyPI package

        candidates.append(str(Path(cmake.CMAKE_BIN_DIR) / "cmake"))
    except ImportError:
        pass
    on_path = shutil.which("cmake")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        try:
            first = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        version = first.split()[2] if first.startswith("cmake version") else "0"
        if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) >= (3, 28):
            return candidate
    raise RunnerError(
        "building the native runner needs CMake >= 3.28 (executorch's CMake config requires it); "
        "run `pip install 'cmake>=3.28'`"
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
        out.flush()
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RunnerError(f"{what} failed (exit {result.returncode}); full log: {log}\n{tail}")


def build_runner(arch: str = "host", force: bool = False) -> Path:
    """Build (or reuse) the native runner for ``arch`` and return the executable."""
    if arch not in ARCHES:
        raise UsageError(
            f"runner architecture {arch!r} is not supported yet; available: {', '.join(ARCHES)}. "
            "The linux-aarch64 cross build comes with the emulated target"
        )
    key = f"executorch-{_executorch_version()}-{platform.system().lower()}-{platform.machine()}-{_sources_hash(RUNNER_SOURCES)}"
    directory = cache_root() / key
    binary = directory / "build" / RUNNER_NAME
    with _locked(cache_root() / f"{key}.lock"):
        if binary.exists() and not force:
            return binary
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        log = directory / "build.log"
        cmake = find_cmake()
        _run(
            [cmake, "-S", str(SOURCE_DIR), "-B", str(directory / "build"), "-DCMAKE_BUILD_TYPE=Release",
             f"-Dexecutorch_DIR={executorch_prefix() / 'share' / 'cmake'}"],
            log, "configuring the native runner",
        )
        _run([cmake, "--build", str(directory / "build"), "-j", str(os.cpu_count() or 2)], log,
             "building the native runner")
        if not binary.exists():
            raise RunnerError(f"the build finished but {binary} is missing; see {log}")
    return binary


def build_mask_library(force: bool = False) -> Path:
    """Build (or reuse) the LD_PRELOAD library that hides SME/SME2 from getauxval (Linux)."""
    if platform.system() != "Linux":
        raise UsageError(
            f"the SME2-masking preload library is for Linux and Android; on {platform.system()} use two "
            "runner builds (--sme2-runner-on / --sme2-runner-off)"
        )
    key = f"mask-{platform.machine()}-{_sources_hash((MASK_SOURCE,))}"
    library = cache_root() / key / MASK_NAME
    with _locked(cache_root() / f"{key}.lock"):
        if library.exists() and not force:
            return library
        library.parent.mkdir(parents=True, exist_ok=True)
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise RunnerError("no C compiler found to build the SME2-masking library; install gcc")
        staging = library.with_suffix(".tmp")
        _run([compiler, "-shared", "-fPIC", "-O2", "-o", str(staging), str(SOURCE_DIR / MASK_SOURCE), "-ldl"],
             library.parent / "build.log", "building the SME2-masking library")
        os.replace(staging, library)
    return library
