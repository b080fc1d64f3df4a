"""Build the native runner and the SME2-masking preload library, cached.

The runner is built with CMake (>= 3.28; the PyPI ``cmake`` package is a
dependency) against the installed executorch wheel's C++ runtime, once per
executorch version, architecture and runner source, under
``$PYTEST_SME2_RUNNER_CACHE`` (default ``~/.cache/pytest-sme2/runners``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.system.locks import locked

SOURCE_DIR = Path(__file__).resolve().parent
RUNNER_SOURCES = ("sme2_runner.cpp", "CMakeLists.txt")
MASK_SOURCE = "sme2_mask.c"
RUNNER_NAME = "sme2_runner"
MASK_NAME = "libsme2_mask.so"
MASK_SOURCE_MACOS = "sme2_mask_macos.c"
MASK_NAME_MACOS = "libsme2_mask.dylib"
EXEC_COUNTER_SOURCE = "exec_counter.c"
CLASSES_HEADER = "instruction_classes.h"  # the instruction classes both counters share
COUNT_PLUGIN_SOURCE = "count_plugin.c"
COUNT_PLUGIN_NAME = "libcount_plugin.so"
EXEC_COUNTER_NAME = "exec_counter"
ARCHES = ("host", "linux-aarch64")
CROSS_CXX = "aarch64-linux-gnu-g++"
CROSS_CC = "aarch64-linux-gnu-gcc"
CROSS_PACKAGE = "g++-aarch64-linux-gnu"
_TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER {cxx})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
"""


class RunnerUnavailable(RunnerError):
    """The installed executorch cannot give pytest-sme2's runner a C++ runtime to link: no setup fixes it, another
    executorch version (or the host target) does. The message names the version and what has it."""


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


def executorch_release(version: str | None = None) -> str:
    """The executorch release without local tags ("1.5.1+cpu" -> "1.5.1"): what runner builds are matched on."""
    return (version or _executorch_version()).split("+")[0]


def runtime_problem(package: Path | None = None) -> str | None:
    """Why the runner cannot be built against the executorch ``package`` (default: the installed one), or None.

    The runner links the wheel's C++ runtime libraries (``lib/libexecutorch*``, the ``executorch::*`` CMake targets,
    the module and ETDump headers). executorch 1.5.1's wheels ship them; 1.4.1's do not: its runtime is only inside
    the Python extension ``extension/pybindings/_portable_lib``, which takes cpuinfo and pthreadpool (XNNPACK's CPU
    feature detection, which SME2 off masks, and its thread pool) from PyTorch's libtorch_cpu, so it cannot run
    without PyTorch for that architecture (on aarch64 Linux only PyPI's CUDA build of torch). The same layout holds
    on every platform of the same version, so the installed package answers for the aarch64 and macOS wheels too."""
    package = package or executorch_prefix()
    if any((package / "lib").glob("libexecutorch.*")):
        return None
    return (
        f"executorch {executorch_release()}'s wheel ships no C++ runtime libraries to build pytest-sme2's runner "
        f"against (no lib/libexecutorch*, no executorch::runtime CMake target, no module.h or ETDump headers: its "
        f"runtime is only inside the Python extension _portable_lib, which takes cpuinfo and pthreadpool from "
        f"PyTorch's libtorch_cpu); the native runner (the emulated, local and adb targets) needs executorch 1.5.1, "
        f"whose wheel ships them: `pip install executorch==1.5.1` (1.4.1's Python binding, the host target, is built "
        f"without the event tracer, so it writes no ETDump to profile either)"
    )


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


def _run(command: list[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
        out.flush()
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RunnerError(f"{what} failed (exit {result.returncode}); full log: {log}\n{tail}")


def _cross_compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RunnerError(
            f"the linux-aarch64 build needs Debian's cross compiler ({name}); install it with "
            f"`apt-get install {CROSS_PACKAGE}` (as root)"
        )
    return path


def compiler_advice(system: str | None = None) -> str:
    """How to get a C/C++ compiler on ``system`` (what the runner and the masking library need)."""
    system = system or platform.system()
    if system == "Darwin":
        return "install Apple's command line tools: `xcode-select --install`"
    return "install a C and C++ compiler: `sudo apt-get install g++` (Debian/Ubuntu) or your distribution's gcc/g++"


def _host_compilers() -> tuple[str | None, str | None]:
    """The C compiler the masking library is built with and the C++ compiler CMake will pick."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    return cc, cxx


def build_problem(arch: str = "host") -> str | None:
    """What stops ``build_runner(arch)`` and ``build_mask_library(arch)`` from working here, or None.

    Only looks (cached builds, compilers, CMake, the executorch wheel); never builds, so
    ``pytest-sme2 doctor`` and the ``auto`` target choice can ask it cheaply. The answer
    names what to install and the command to run next.
    """
    if arch not in ARCHES:
        raise UsageError(f"runner architecture {arch!r} is not supported; choose one of {', '.join(ARCHES)}")
    then = "then run `pytest-sme2 build-runner`" + (" --arch linux-aarch64" if arch == "linux-aarch64" else "")
    if arch == "host" and platform.system() not in ("Linux", "Darwin"):
        return (
            f"SME2 off with one runner build needs the Linux or macOS masking library; on {platform.system()} "
            "pass two runner builds with --sme2-runner-on and --sme2-runner-off"
        )
    try:
        binary = runner_binary(arch)
        unavailable = runtime_problem()
    except (ImportError, RunnerError) as exc:
        return f"{exc}"
    if unavailable:
        return unavailable
    if binary.exists() and _mask_library_path(arch).exists():
        return None
    if arch == "linux-aarch64":
        missing = [name for name in (CROSS_CXX, CROSS_CC) if shutil.which(name) is None]
        if missing:
            return f"{', '.join(missing)} not found: `sudo apt-get install {CROSS_PACKAGE}`, {then}"
    else:
        cc, cxx = _host_compilers()
        if cc is None or cxx is None:
            return f"no {'C++' if cc else 'C'} compiler found: {compiler_advice()}, {then}"
        if not (executorch_prefix() / "share" / "cmake" / "executorch-config.cmake").exists():
            reinstall = f"pip install --force-reinstall executorch=={executorch_release()}"
            return (
                f"the installed executorch at {executorch_prefix()} has no share/cmake/executorch-config.cmake "
                f"to build against; reinstall it with `{reinstall}`"
            )
    try:
        find_cmake()
    except RunnerError as exc:
        return f"{exc}, {then}"
    return None


def _download_wheel(version: str, platform_tag: str, label: str, log: Path) -> Path:
    """The executorch wheel file for ``platform_tag`` in the cache's wheels folder, downloaded if absent."""
    wheels = cache_root() / "wheels"
    arch_tag = platform_tag.rsplit("_", 1)[-1]  # aarch64, arm64
    pattern = f"executorch-{version}-*{platform_tag.split('_')[0]}*{arch_tag}.whl"
    found = sorted(wheels.glob(pattern))
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            platform_tag,
            "--python-version",
            f"{sys.version_info.major}.{sys.version_info.minor}",
            f"executorch=={version}",
            "-d",
            str(wheels),
        ],
        log,
        f"downloading the {label} executorch {version} wheel",
    )
    found = sorted(wheels.glob(pattern))
    if not found:
        raise RunnerError(f"pip reported success but no {label} executorch {version} wheel is in {wheels}")
    return found[-1]


def _executorch_wheel(version: str | None, platform_tag: str, label: str, marker: str) -> Path:
    """The executorch wheel for ``platform_tag`` (pip download), its lib/, include/ and share/ unpacked once.

    ``marker``: a file under the package whose presence means the unpacking finished.
    """
    version = executorch_release(version)
    root = cache_root() / f"executorch-{version}-{label}"
    package = root / "executorch"
    with locked(cache_root() / f"{root.name}.lock"):
        if (package / marker).exists():
            return package
        wheel_file = _download_wheel(version, platform_tag, label, cache_root() / f"{root.name}.log")
        staging = root.with_name(root.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel_file) as wheel:
            members = [
                m
                for m in wheel.namelist()
                if m.startswith(("executorch/lib/", "executorch/include/", "executorch/share/"))
            ]
            wheel.extractall(staging, members)
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staging, root)
    return package


def aarch64_executorch(version: str | None = None) -> Path:
    """The aarch64 executorch wheel's package folder, downloaded and unpacked once."""
    return _executorch_wheel(
        version, "manylinux_2_28_aarch64", "manylinux-aarch64", "share/cmake/executorch-config.cmake"
    )


def aarch64_wheel(version: str | None = None) -> Path:
    """The aarch64 executorch wheel file itself (kernel_kit.py takes a library from it), downloaded once."""
    version = executorch_release(version)
    label = "manylinux-aarch64"
    with locked(cache_root() / f"executorch-{version}-{label}.lock"):
        return _download_wheel(
            version, "manylinux_2_28_aarch64", label, cache_root() / f"executorch-{version}-{label}.log"
        )


def macos_executorch(version: str | None = None) -> Path:
    """The macOS arm64 executorch wheel's package folder (read by the macOS masking contract test), unpacked once."""
    return _executorch_wheel(version, "macosx_14_0_arm64", "macosx-arm64", "lib/libexecutorch_threadpool.dylib")


def runner_binary(arch: str = "host") -> Path:
    """Where the runner for ``arch`` is (or would be) built: one folder per executorch version, arch and source."""
    if arch not in ARCHES:
        raise UsageError(f"runner architecture {arch!r} is not supported; choose one of {', '.join(ARCHES)}")
    machine = "aarch64" if arch == "linux-aarch64" else platform.machine()
    system = "linux" if arch == "linux-aarch64" else platform.system().lower()
    key = f"executorch-{_executorch_version()}-{system}-{machine}-{_sources_hash(RUNNER_SOURCES)}"
    return cache_root() / key / "build" / RUNNER_NAME


def configure_command(cmake: str, build_dir: Path, prefix: Path) -> list[str]:
    """The CMake configure of the runner against the executorch package at ``prefix`` (its share/cmake), the
    same on Linux and macOS; tests/run/test_macos_contract.py configures it against the macOS wheel."""
    return [
        cmake,
        "-S",
        str(SOURCE_DIR),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DPYTEST_SME2_EXECUTORCH_VERSION={executorch_release()}",
        f"-Dexecutorch_DIR={prefix / 'share' / 'cmake'}",
    ]


def build_runner(arch: str = "host", force: bool = False) -> Path:
    """Build (or reuse) the native runner for ``arch`` and return the executable.

    ``host`` links the installed executorch wheel; ``linux-aarch64`` cross
    compiles with Debian's g++-aarch64-linux-gnu against the aarch64 wheel of
    the same executorch version (for the emulated target and Arm Linux boards).
    """
    binary = runner_binary(arch)
    directory = binary.parent.parent
    key = directory.name
    with locked(cache_root() / f"{key}.lock"):
        if binary.exists() and not force:
            return binary
        unavailable = runtime_problem()
        if unavailable:
            raise RunnerUnavailable(unavailable)
        cmake = find_cmake()
        if arch == "linux-aarch64":
            cxx = _cross_compiler(CROSS_CXX)
            prefix = aarch64_executorch()
        else:
            prefix = executorch_prefix()
        configure = configure_command(cmake, directory / "build", prefix)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        log = directory / "build.log"
        if arch == "linux-aarch64":
            toolchain = directory / "aarch64-toolchain.cmake"
            toolchain.write_text(_TOOLCHAIN.format(cxx=cxx))
            configure.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
        _run(configure, log, f"configuring the native runner ({arch})")
        _run(
            [cmake, "--build", str(directory / "build"), "-j", str(os.cpu_count() or 2)],
            log,
            "building the native runner",
        )
        if not binary.exists():
            raise RunnerError(f"the build finished but {binary} is missing; see {log}")
    return binary


def mask_preload_variable(system: str | None = None) -> str:
    """The loader variable that injects the masking library: LD_PRELOAD (Linux, Android), DYLD_INSERT_LIBRARIES
    (macOS)."""
    return "DYLD_INSERT_LIBRARIES" if (system or platform.system()) == "Darwin" else "LD_PRELOAD"


def _mask_library_path(arch: str) -> Path:
    """Where the masking library for ``arch`` is (or would be) built: one folder per system, machine and source."""
    darwin = arch == "host" and platform.system() == "Darwin"
    source = MASK_SOURCE_MACOS if darwin else MASK_SOURCE
    machine = "aarch64" if arch == "linux-aarch64" else platform.machine()
    key = f"mask-{platform.system().lower() if darwin else 'linux'}-{machine}-{_sources_hash((source,))}"
    return cache_root() / key / (MASK_NAME_MACOS if darwin else MASK_NAME)


def build_mask_library(arch: str = "host", force: bool = False) -> Path:
    """Build (or reuse) the preload library that hides SME/SME2 from CPU feature detection.

    Linux/Android: ``libsme2_mask.so`` answers getauxval(AT_HWCAP2) without the
    SME bits. macOS: ``libsme2_mask.dylib`` answers 0 for the
    hw.optional.arm.FEAT_SME* sysctls (untested: no Mac in CI).
    """
    if arch not in ARCHES:
        raise UsageError(f"architecture {arch!r} is not supported; choose one of {', '.join(ARCHES)}")
    darwin = arch == "host" and platform.system() == "Darwin"
    if arch == "host" and platform.system() not in ("Linux", "Darwin"):
        raise UsageError(
            f"the SME2-masking library is for Linux, Android and macOS; on {platform.system()} use two "
            "runner builds (--sme2-runner-on / --sme2-runner-off)"
        )
    source = MASK_SOURCE_MACOS if darwin else MASK_SOURCE
    library = _mask_library_path(arch)
    key = library.parent.name
    with locked(cache_root() / f"{key}.lock"):
        if library.exists() and not force:
            return library
        library.parent.mkdir(parents=True, exist_ok=True)
        compiler: str | None
        if arch == "linux-aarch64":
            compiler = _cross_compiler(CROSS_CC)
        else:
            compiler = _host_compilers()[0]
        if compiler is None:
            raise RunnerError(f"no C compiler found to build the SME2-masking library; {compiler_advice()}")
        staging = library.with_suffix(".tmp")
        flags = ["-dynamiclib"] if darwin else ["-shared", "-fPIC"]
        libraries = [] if darwin else ["-ldl"]
        _run(
            [compiler, *flags, "-O2", "-o", str(staging), str(SOURCE_DIR / source), *libraries],
            library.parent / "build.log",
            "building the SME2-masking library",
        )
        os.replace(staging, library)
    return library


def _compiled(output: Path, compiler: str, arguments: list[str], what: str, force: bool = False) -> Path:
    """``output`` built once by ``compiler arguments... -o output`` (a staging name first, so a killed build
    leaves no half-written file under the final name), under a lock: the one way the small C helpers are built."""
    with locked(cache_root() / f"{output.parent.name}.lock"):
        if output.exists() and not force:
            return output
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = output.with_suffix(".tmp")
        _run([compiler, *arguments, "-o", str(staging)], output.parent / "build.log", what)
        os.replace(staging, output)
    return output


def build_exec_counter(force: bool = False) -> Path:
    """Build (or reuse) the host program that compacts qemu's execution log (see exec_counter.c).

    Built with this machine's C compiler, once per source version, beside the runners.
    """
    binary = (
        cache_root()
        / f"exec-counter-{platform.machine()}-{_sources_hash((EXEC_COUNTER_SOURCE, CLASSES_HEADER))}"
        / EXEC_COUNTER_NAME
    )
    if binary.exists() and not force:
        return binary
    compiler = _host_compilers()[0]
    if compiler is None:
        raise RunnerError(
            f"no C compiler found to build the emulated target's instruction counter; {compiler_advice()}"
        )
    return _compiled(
        binary, compiler, ["-O2", str(SOURCE_DIR / EXEC_COUNTER_SOURCE)], "building the instruction counter", force
    )


ALLOCATOR_SOURCE = "fixed_cost_alloc.c"
ALLOCATOR_NAME = "libfixed_cost_alloc.so"


def build_fixed_cost_allocator(force: bool = False) -> Path:
    """Build (or reuse) the aarch64 allocator every counted run preloads (fixed_cost_alloc.c): a call's cost
    follows its arguments, not the heap's history, so an operator counts the same in any program."""
    library = cache_root() / f"allocator-linux-aarch64-{_sources_hash((ALLOCATOR_SOURCE,))}" / ALLOCATOR_NAME
    if library.exists() and not force:
        return library
    compiler = _cross_compiler(CROSS_CC)
    # -fno-builtin: else GCC turns calloc's malloc-then-memset into a call of calloc, itself (an endless loop)
    arguments = ["-shared", "-fPIC", "-O2", "-fno-builtin", str(SOURCE_DIR / ALLOCATOR_SOURCE)]
    return _compiled(library, compiler, arguments, "building the counted runs' allocator", force)


def build_count_plugin(header: Path, force: bool = False) -> Path:
    """Build (or reuse) the qemu counting plugin (count_plugin.c) against ``header``, the qemu-plugin.h of the
    qemu that loads it: once per source version and header, with this machine's C compiler and glib's flags."""
    digest = hashlib.sha256(header.read_bytes()).hexdigest()[:8]
    key = f"count-plugin-{platform.machine()}-{_sources_hash((COUNT_PLUGIN_SOURCE, CLASSES_HEADER))}-{digest}"
    library = cache_root() / key / COUNT_PLUGIN_NAME
    with locked(cache_root() / f"{key}.lock"):
        if library.exists() and not force:
            return library
        compiler = _host_compilers()[0]
        if compiler is None:
            raise RunnerError(
                f"no C compiler found to build the emulated target's counting plugin; {compiler_advice()}"
            )
        flags = subprocess.run(["pkg-config", "--cflags", "glib-2.0"], capture_output=True, text=True)
        if flags.returncode != 0:
            raise RunnerError(
                "the counting plugin needs glib's headers (qemu-plugin.h includes glib.h): "
                "`sudo apt-get install libglib2.0-dev pkg-config`"
            )
        library.parent.mkdir(parents=True, exist_ok=True)
        staging = library.with_suffix(".tmp")
        _run(
            [
                compiler,
                "-O2",
                "-shared",
                "-fPIC",
                f"-I{header.parent}",
                *flags.stdout.split(),
                "-o",
                str(staging),
                str(SOURCE_DIR / COUNT_PLUGIN_SOURCE),
            ],
            library.parent / "build.log",
            "building the counting plugin",
        )
        os.replace(staging, library)
    return library


MICROBENCH_SOURCE = "microbench.c"
MICROBENCH_NAME = "microbench"


def build_microbench(arch: str = "linux-aarch64", force: bool = False) -> Path:
    """Build (or reuse) ``pytest-sme2 calibrate``'s microbenchmarks (microbench.c) for ``arch``.

    ``linux-aarch64``: Debian's cross compiler, the runner's, statically linked so the same file runs on an Arm
    Linux board, on Android through adb (no glibc loader there) and under qemu. ``host``: this machine's C
    compiler, on an SME2 Mac or Arm Linux machine (the local target).
    """
    if arch not in ARCHES:
        raise UsageError(f"architecture {arch!r} is not supported; choose one of {', '.join(ARCHES)}")
    machine = "aarch64" if arch == "linux-aarch64" else platform.machine()
    system = "linux" if arch == "linux-aarch64" else platform.system().lower()
    if machine not in ("aarch64", "arm64"):
        raise UsageError(
            f"the microbenchmarks are AArch64 code; this machine is {machine}: calibrate a device "
            f"through adb (--sme2-target adb) or under emulation (--sme2-target emulated)"
        )
    binary = cache_root() / f"microbench-{system}-{machine}-{_sources_hash((MICROBENCH_SOURCE,))}" / MICROBENCH_NAME
    with locked(cache_root() / f"{binary.parent.name}.lock"):
        if binary.exists() and not force:
            return binary
        compiler = _cross_compiler(CROSS_CC) if arch == "linux-aarch64" else _host_compilers()[0]
        if compiler is None:
            raise RunnerError(f"no C compiler found to build the microbenchmarks; {compiler_advice()}")
        binary.parent.mkdir(parents=True, exist_ok=True)
        staging = binary.with_suffix(".tmp")
        static = ["-static"] if arch == "linux-aarch64" else []
        _run(
            [compiler, "-O2", *static, "-o", str(staging), str(SOURCE_DIR / MICROBENCH_SOURCE)],
            binary.parent / "build.log",
            "building the calibration microbenchmarks",
        )
        os.replace(staging, binary)
    return binary
