"""What the macOS masking library (native/sme2_mask_macos.c) relies on, checked without a Mac.

The project has no Mac, so SME2 off on an M4 has never run. What can be checked
here: the pinned macOS arm64 executorch wheel (downloaded once into the runner
cache) still has cpuinfo import ``_sysctlbyname`` and ask for the same SME names;
the interposer's own name test, compiled for Linux, hides every one of them and
nothing else; and the interposer cross-builds into an arm64 Mach-O dylib with
dyld's ``__DATA,__interpose`` tuple (Debian's clang and lld, no macOS SDK).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers_versions import needs_runtime_libraries

from pytest_sme2.errors import RunnerError
from pytest_sme2.run.native.build import MASK_SOURCE_MACOS, SOURCE_DIR, macos_executorch
from pytest_sme2.run.native.macho import MachOError, read_macho

# The runner links the wheel's C++ runtime libraries: on executorch 1.4.1 (none) every test here skips, naming why.
pytestmark = needs_runtime_libraries

# The SME sysctls cpuinfo in executorch 1.5.1's macOS wheel asks for (../shared/FACTS.md, "macOS").
# A new name here (say FEAT_SME2p2) must make this test fail until the interposer is checked against it.
CPUINFO_SME_NAMES = {
    "hw.optional.arm.FEAT_SME",
    "hw.optional.arm.FEAT_SME2",
    "hw.optional.arm.FEAT_SME2p1",
    "hw.optional.arm.FEAT_SME_B16B16",
    "hw.optional.arm.FEAT_SME_F16F16",
    "hw.optional.arm.SME_I16I32",
    "hw.optional.arm.SME_BI32I32",
    "hw.optional.arm.sme_max_svl_b",
}
CPUINFO_LIBRARY = "libexecutorch_threadpool.dylib"


@pytest.fixture(scope="module")
def macos_lib() -> Path:
    try:
        return macos_executorch() / "lib"
    except RunnerError as exc:  # offline: the contract cannot be read, which is not a broken contract
        pytest.skip(f"the macOS executorch wheel could not be downloaded: {exc}")


def _sme_names(strings: tuple[str, ...]) -> set[str]:
    return {s for s in strings if s.startswith("hw.optional.") and "sme" in s.lower()}


def test_cpuinfo_asks_sysctlbyname_for_the_known_sme_names(macos_lib: Path) -> None:
    cpuinfo = read_macho(macos_lib / CPUINFO_LIBRARY)
    assert cpuinfo.cpu == "arm64"
    # An undefined external: dyld binds it, so the interposer sees every call.
    assert "_sysctlbyname" in cpuinfo.imports
    # SME names have no fixed MIB; without sysctlnametomib they cannot be read around sysctlbyname.
    assert "_sysctlnametomib" not in cpuinfo.imports
    assert _sme_names(cpuinfo.cstrings()) == CPUINFO_SME_NAMES


def test_no_other_library_of_the_runner_reads_cpu_features(macos_lib: Path) -> None:
    """A second copy of cpuinfo (e.g. linked into the XNNPACK backend) would need its own check."""
    others = {}
    for library in sorted(macos_lib.glob("*.dylib")):
        if library.name == CPUINFO_LIBRARY:
            continue
        image = read_macho(library)
        names = _sme_names(image.cstrings())
        reads_features = any(s.startswith("hw.optional.arm.") for s in image.cstrings())
        if names or "_sysctlbyname" in image.imports and reads_features:
            others[library.name] = sorted(names)
    assert others == {}
    # XNNPACK asks the threadpool library's cpuinfo (the one the interposer answers) for CPU features
    xnnpack = read_macho(macos_lib / "libexecutorch_backend_xnnpack.dylib")
    assert f"@rpath/{CPUINFO_LIBRARY}" in xnnpack.dylibs


@pytest.fixture(scope="module")
def interposer_for_linux(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The interposer's source built for this machine: its name test and answer, without the macOS-only tuple."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler: apt-get install gcc")
    library = tmp_path_factory.mktemp("mask-macos") / "libmask_macos_logic.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE_DIR / MASK_SOURCE_MACOS)], check=True
    )
    loaded = ctypes.CDLL(str(library))
    loaded.pytest_sme2_hides_sysctl.argtypes = [ctypes.c_char_p]
    loaded.pytest_sme2_hidden_answer.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    return loaded


def test_interposer_hides_every_sme_name_cpuinfo_asks_and_nothing_else(
    macos_lib: Path, interposer_for_linux: ctypes.CDLL
) -> None:
    asked = [s for s in read_macho(macos_lib / CPUINFO_LIBRARY).cstrings() if s.startswith("hw.")]
    hidden = {name for name in asked if interposer_for_linux.pytest_sme2_hides_sysctl(name.encode())}
    assert hidden == _sme_names(tuple(asked))
    # what cpuinfo needs besides SME keeps its real answer (NEON dot product, i8mm, core counts)
    for kept in ("hw.optional.arm.FEAT_DotProd", "hw.optional.arm.FEAT_I8MM", "hw.logicalcpu_max"):
        assert kept in asked and kept not in hidden


@pytest.mark.parametrize("width", [4, 8])
def test_hidden_answer_is_zero_like_a_mac_without_sme(interposer_for_linux: ctypes.CDLL, width: int) -> None:
    buffer = (ctypes.c_ubyte * width)(*([0xAB] * width))
    size = ctypes.c_size_t(width)
    assert interposer_for_linux.pytest_sme2_hidden_answer(ctypes.cast(buffer, ctypes.c_void_p), ctypes.byref(size)) == 0
    assert bytes(buffer) == bytes(width) and size.value == 4
    probe = ctypes.c_size_t(0)  # a size query (no buffer) learns the integer's size
    assert interposer_for_linux.pytest_sme2_hidden_answer(None, ctypes.byref(probe)) == 0 and probe.value == 4


def test_interposer_cross_builds_into_an_arm64_dylib_with_the_interpose_tuple(tmp_path: Path) -> None:
    clang = shutil.which("clang")
    if clang is None or not (shutil.which("ld64.lld") or list(Path("/usr/bin").glob("ld64.lld*"))):
        pytest.skip("needs Debian's clang and lld to cross-build for macOS: apt-get install clang lld")
    resource = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True, check=True).stdout.strip()
    dylib = tmp_path / "libsme2_mask.dylib"
    # No macOS SDK exists here: no system headers (the source declares what it uses), no libSystem to link,
    # so sysctlbyname is left for dyld to find at load time.
    subprocess.run(
        [
            clang,
            "-target",
            "arm64-apple-macos14",
            "-nostdinc",
            "-isystem",
            f"{resource}/include",
            "-dynamiclib",
            "-nostdlib",
            "-fuse-ld=lld",
            "-Wl,-undefined,dynamic_lookup",
            "-Wl,-platform_version,macos,14.0,14.0",
            "-O2",
            "-o",
            str(dylib),
            str(SOURCE_DIR / MASK_SOURCE_MACOS),
        ],
        check=True,
    )
    image = read_macho(dylib)
    assert image.cpu == "arm64"
    assert len(image.section("__DATA", "__interpose")) == 16  # one (replacement, original) pair of pointers
    assert "_sysctlbyname" in image.imports
    assert {"_pytest_sme2_sme_masked", "_pytest_sme2_hides_sysctl"} <= image.exports


def test_runner_configures_against_the_macos_wheel_and_links_with_an_rpath_to_its_dylibs(
    macos_lib: Path, tmp_path: Path
) -> None:
    """The runner's CMake configure on an M4 Mac (build.configure_command, the one build_runner runs), here
    against the macOS wheel's CMake package with CMake told the system is Darwin: executorch-config.cmake finds
    every dylib the runner links, and the generated link line names them from the wheel's lib folder with an
    rpath to it. Every install name they load is @rpath (so found there) or a macOS system library. Compiling
    and linking need the macOS SDK, which this machine has not: those steps have not run."""
    from pytest_sme2.run.native.build import configure_command, find_cmake

    clang = shutil.which("clang++")
    if clang is None:
        pytest.skip("needs Debian's clang to configure for macOS: apt-get install clang")
    prefix = macos_lib.parent
    build = tmp_path / "build"
    command = configure_command(find_cmake(), build, prefix) + [
        "-DCMAKE_SYSTEM_NAME=Darwin",
        "-DCMAKE_OSX_ARCHITECTURES=arm64",
        f"-DCMAKE_CXX_COMPILER={clang}",
        "-DCMAKE_CXX_COMPILER_WORKS=1",
    ]  # no SDK: CMake's try-compile of a test program cannot link
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    link = (build / "CMakeFiles" / "sme2_runner.dir" / "link.txt").read_text().split()
    linked = {Path(word).resolve() for word in link if word.endswith(".dylib")}
    wanted = {
        "libexecutorch.dylib",
        "libexecutorch_etdump.dylib",
        "libexecutorch_threadpool.dylib",
        "libexecutorch_backend_xnnpack.dylib",
        "libexecutorch_kernels_optimized.dylib",
        "libexecutorch_kernels_quantized.dylib",
    }
    assert {path.name for path in linked} == wanted and {path.parent for path in linked} == {macos_lib.resolve()}
    rpaths = {
        Path(link[i + 3]).resolve()
        for i, word in enumerate(link)
        if word == "-Xlinker" and link[i + 1] == "-rpath" and not link[i + 3].startswith("@")
    }
    assert macos_lib.resolve() in rpaths, f"no -rpath to {macos_lib} in: {' '.join(link)}"
    pending, seen = list(linked), set()
    while pending:
        image = read_macho(pending.pop())
        for name in image.dylibs:
            if name.startswith("@rpath/"):
                target = macos_lib / name.removeprefix("@rpath/")
                assert target.is_file(), f"{image.path.name} loads {name}, which the wheel's lib folder lacks"
                if target not in seen:
                    seen.add(target)
                    pending.append(target)
            else:
                assert name.startswith(("/usr/lib/", "/System/Library/")), f"{image.path.name} loads {name}"


def test_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    elf = Path(shutil.which("true") or "/bin/true")
    with pytest.raises(MachOError, match="not a little-endian 64-bit Mach-O"):
        read_macho(elf)
    short = tmp_path / "short"
    short.write_bytes(b"\xcf\xfa\xed\xfe")
    with pytest.raises(MachOError, match="too short"):
        read_macho(short)


def test_an_m4_is_recognised_from_its_sysctls_and_auto_picks_the_native_runner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """host_cpu() on macOS reads hw.optional.arm.FEAT_SME/FEAT_SME2 and the brand string with `sysctl -n`: here a
    stand-in sysctl answers as an M4 does, and the default target's plan is then the native runner, SME2 on and
    off (what `make perf` runs on a Mac: auto-target builds the runner, then one process, no xdist)."""
    from pytest_sme2.run import cpu
    from pytest_sme2.run.targets.auto import plan

    answers = {
        "hw.optional.arm.FEAT_SME": "1",
        "hw.optional.arm.FEAT_SME2": "1",
        "machdep.cpu.brand_string": "Apple M4",
    }
    sysctl = tmp_path / "sysctl"
    sysctl.write_text(
        '#!/bin/sh\ncase "$2" in\n'
        + "".join(f"  {k}) echo {v};;\n" for k, v in answers.items())
        + "  *) exit 1;;\nesac\n"
    )
    sysctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(cpu.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(cpu.platform, "machine", lambda: "arm64")
    cpu.host_cpu.cache_clear()
    try:
        m4 = cpu.host_cpu()
    finally:
        cpu.host_cpu.cache_clear()
    assert (m4.name, m4.arch, m4.system, m4.has_sme2) == ("Apple M4", "arm64", "Darwin", True)
    chosen = plan(m4, None, None)
    assert chosen.target == "local" and chosen.modes == "SME2 on and SME2 off"
    answers["hw.optional.arm.FEAT_SME2"] = "0"  # a Mac without SME2
    sysctl.write_text(
        '#!/bin/sh\ncase "$2" in\n'
        + "".join(f"  {k}) echo {v};;\n" for k, v in answers.items())
        + "  *) exit 1;;\nesac\n"
    )
    cpu.host_cpu.cache_clear()
    try:
        assert not cpu.host_cpu().has_sme2
    finally:
        cpu.host_cpu.cache_clear()
