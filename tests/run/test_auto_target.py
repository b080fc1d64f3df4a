"""``--sme2-target=auto`` (the default): which target it picks and what it runs, on SME2 and other CPUs.

The SME2 case is exercised end to end on an SME2 Linux machine made with qemu:
``qemu-aarch64 -cpu max`` is the CPU, its own /proc/cpuinfo (which qemu fills
from the emulated CPU's features) is what the choice reads, and the aarch64
runner and masking library are what runs. The only seam is ``this_machine``,
which a real aarch64 Linux host answers from its own /proc/cpuinfo.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from helpers_versions import needs_runtime_libraries

from pytest_sme2.run import emulation_setup as emulation
from pytest_sme2.run.cpu import CpuInfo, parse_proc_cpuinfo
from pytest_sme2.run.native import build
from pytest_sme2.run.targets import auto
from pytest_sme2.run.targets.auto import AutoPlan, Machine, plan
from pytest_sme2.run.targets.base import TargetSettings

STATUS = emulation.status()
needs_emulation = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")

SME2_CPU = CpuInfo("Apple M4", "arm64", "Darwin", frozenset({"sme", "sme2"}))
PLAIN_CPU = CpuInfo("AMD EPYC", "x86_64", "Linux", frozenset({"avx2"}))


# --- the choice, from facts ---------------------------------------------------------------------------


def test_sme2_cpu_with_a_compiler_runs_on_and_off_with_the_native_runner() -> None:
    chosen = plan(SME2_CPU, None, None)
    assert (chosen.target, chosen.sme2_on, chosen.sme2_off) == ("local", None, None)
    assert chosen.modes == "SME2 on and SME2 off"
    assert "DYLD_INSERT_LIBRARIES" in chosen.why  # macOS: the dyld interposer
    linux = plan(CpuInfo("Neoverse V3", "aarch64", "Linux", frozenset({"sme2"})), None, None)
    assert "LD_PRELOAD" in linux.why


def test_sme2_cpu_without_a_compiler_falls_back_to_the_host_and_says_what_to_install() -> None:
    chosen = plan(SME2_CPU, "no C++ compiler found: install Apple's command line tools: `xcode-select --install`", None)
    assert chosen.target == "host" and chosen.sme2_on is None
    assert chosen.modes == "SME2 on only"
    assert "SME2 off needs the native runner" in chosen.sme2_off and "xcode-select --install" in chosen.sme2_off


def test_cpu_without_sme2_uses_emulation_when_ready_else_the_host() -> None:
    ready = emulation.EmulationStatus(Path("/q"), "11.1", Path("/r"), None)
    missing = emulation.EmulationStatus(
        None, None, None, "qemu-user 11.1 is not set up; run `pytest-sme2 setup-emulation`"
    )
    assert plan(PLAIN_CPU, None, ready).target == "emulated"
    fallback = plan(PLAIN_CPU, None, missing)
    assert (fallback.target, fallback.sme2_off, fallback.modes) == ("host", None, "SME2 off only")
    assert "pytest-sme2 setup-emulation" in fallback.sme2_on


@needs_runtime_libraries
def test_build_problem_names_the_compiler_and_cmake_fixes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTEST_SME2_RUNNER_CACHE", str(tmp_path))  # nothing built yet
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    problem = build.build_problem("host")
    assert "compiler" in problem and build.compiler_advice() in problem and "pytest-sme2 build-runner" in problem
    assert "xcode-select --install" in build.compiler_advice("Darwin")
    assert "apt-get install g++" in build.compiler_advice("Linux")
    assert build.build_problem("linux-aarch64").startswith("aarch64-linux-gnu-g++")


def test_auto_on_an_sme2_cpu_builds_nothing_for_given_runners_and_skips_off_with_the_fix_without_a_compiler(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a CPU that claims SME2 but runs this machine's binaries: only the choice and the target's set-up are looked at
    machine = Machine(CpuInfo("SME2 test CPU", os.uname().machine, "Linux", frozenset({"sme", "sme2"})))
    on, off = tmp_path / "runner-on", tmp_path / "runner-off"
    for path in (on, off):
        shutil.copy2(shutil.which("true"), path)
    monkeypatch.setattr(build, "build_problem", lambda arch="host": None)
    target = auto.make_auto_target(TargetSettings(tmp_path, runner_on=on, runner_off=off), machine)
    assert target.info.name == "local" and target.two_builds and target.unsupported(False) is None

    monkeypatch.setattr(build, "build_problem", lambda arch="host": "no C++ compiler found: install one")
    fallback = auto.make_auto_target(TargetSettings(tmp_path), machine)
    assert fallback.info.name == "host" and fallback.unsupported(True) is None
    assert fallback.unsupported(False).endswith("SME2 off needs the native runner: no C++ compiler found: install one")


def test_doctor_says_which_target_the_default_command_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.cli import doctor

    monkeypatch.setattr(
        auto,
        "current_plan",
        lambda machine=None: AutoPlan(
            "host", "'Apple M4' has SME2, but ...", None, "SME2 off needs the native runner: install cmake"
        ),
    )
    check = next(c for c in doctor.run_checks() if c.name == "default target (auto)")
    assert check.state == doctor.MISSING
    assert check.detail.startswith("host: runs SME2 on only")
    assert "SME2 off skips: SME2 off needs the native runner: install cmake" in check.fix


# --- the choice on a real SME2 Linux CPU (qemu), end to end ----------------------------------------------


def _guest_cpu(tmp_path: Path, cpu: str) -> CpuInfo:
    """What a Linux program on ``qemu-aarch64 -cpu <cpu>`` reads in /proc/cpuinfo, parsed like host_cpu does."""
    compiler = shutil.which("aarch64-linux-gnu-gcc")
    if compiler is None:
        pytest.skip("needs Debian's aarch64 cross compiler: apt-get install g++-aarch64-linux-gnu")
    source = tmp_path / "cat_cpuinfo.c"
    source.write_text(
        '#include <stdio.h>\nint main(void) { FILE* f = fopen("/proc/cpuinfo", "r"); int c;\n'
        "  if (!f) return 1; while ((c = fgetc(f)) != EOF) putchar(c); return 0; }\n"
    )
    subprocess.run([compiler, "-O1", "-o", str(tmp_path / "cat_cpuinfo"), str(source)], check=True)
    text = subprocess.run(
        [str(STATUS.qemu), "-cpu", cpu, str(tmp_path / "cat_cpuinfo")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "QEMU_LD_PREFIX": str(emulation.SYSROOT)},
    ).stdout
    name, features = parse_proc_cpuinfo(text, "aarch64")
    return CpuInfo(name, "aarch64", "Linux", features)


def _qemu_machine(tmp_path: Path, cpu: str) -> Machine:
    return Machine(
        _guest_cpu(tmp_path, cpu),
        runner_arch="linux-aarch64",
        launcher=(str(STATUS.qemu), "-cpu", cpu),
        env={"QEMU_LD_PREFIX": str(emulation.SYSROOT)},
    )


SME2_ON_OFF_TEST = """
import pytest
from pytest_sme2 import assert_outputs_match

pytestmark = [pytest.mark.sme2, pytest.mark.model("tiny")]

def test_on_and_off(exported_pte, runner, etdump_profile):
    on = etdump_profile(exported_pte, runner(sme2=True))
    off = etdump_profile(exported_pte, runner(sme2=False))
    target = on.metadata["target"]
    assert target["name"] == "local" and target["arch"] == "aarch64" and target["has_sme2"]
    assert target["details"]["sme2_off_mode"] == "one build, SME2 masked by preload"
    # the tiny model's 3x3 convolution and linear take packed SME kernels with SME2 on, none with it off
    assert on.sme_path_share == 1.0 and on.sme_path_ops == 2
    assert off.sme_path_share == 0.0 and off.sme_path_ops == 0
    assert_outputs_match(on, exported_pte)
    assert_outputs_match(off, exported_pte)
"""


@needs_emulation
def test_default_command_on_an_sme2_linux_cpu_runs_sme2_on_and_off(
    pytester: pytest.Pytester, shared_export_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import TINY_MODEL

    machine = _qemu_machine(tmp_path, emulation.svl_cpu(emulation.DEFAULT_SVL_BITS))
    assert machine.cpu.has_sme2, machine.cpu.features  # qemu -cpu max reports SME2 in /proc/cpuinfo
    assert build.build_problem("linux-aarch64") is None, "run `pytest-sme2 setup-emulation` first"
    monkeypatch.setattr(auto, "this_machine", lambda: machine)
    (pytester.mkdir("models") / "tiny.py").write_text(TINY_MODEL)
    # no sme2_target: the default command
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        sme2_model_dirs = models
        sme2_cache_dir = {shared_export_cache}
        filterwarnings = ignore
        """)
    )
    pytester.makepyfile(SME2_ON_OFF_TEST)
    result = pytester.runpytest_inprocess(
        "--sme2-no-baselines", "--sme2-runs=1", "--sme2-warmup=0", "--sme2-artifacts-dir=artifacts", "-rs"
    )
    result.assert_outcomes(passed=1)
    first_lines = sorted(log.read_text().splitlines()[0] for log in (pytester.path / "artifacts").rglob("runner.log"))
    mask = build.build_mask_library("linux-aarch64")
    qemu = f"{STATUS.qemu} -cpu {emulation.svl_cpu(emulation.DEFAULT_SVL_BITS)} "
    assert len(first_lines) == 2
    off_line = next(line for line in first_lines if line.startswith(f"$ LD_PRELOAD={mask} {qemu}"))
    on_line = next(line for line in first_lines if line.startswith(f"$ {qemu}"))
    # The kernels that really executed, from qemu's trace of the same two commands: the masking hides SME
    # and SME2 entirely (no SME1 fallback either), while the unmasked run executes KleidiAI SME2 matmuls.
    on_kernels = _executed_sme_kernels(on_line, tmp_path / "trace-on")
    off_kernels = _executed_sme_kernels(off_line, tmp_path / "trace-off")
    assert any(k.startswith("kai_run_matmul_") and k.endswith("_sme2_mopa") for k in on_kernels), on_kernels
    assert off_kernels == ()


def _executed_sme_kernels(logged_command: str, folder: Path) -> tuple[str, ...]:
    """Rerun a logged runner command (``$ [LD_PRELOAD=...] qemu -cpu X runner ...``) once under qemu's in_asm log."""
    from helpers_in_asm import translated_functions

    from pytest_sme2.evidence.kernel_trace import KernelTrace

    words = shlex.split(logged_command[2:])
    env = {**os.environ, "QEMU_LD_PREFIX": str(emulation.SYSROOT)}
    if words[0].startswith("LD_PRELOAD="):
        env["LD_PRELOAD"] = words.pop(0).split("=", 1)[1]
    folder.mkdir()
    log, maps = folder / "in_asm.log", folder / "maps.txt"
    runner_args = [w for w in words[3:] if not w.startswith(("--num_executions=", "--warmup="))]
    command = [
        *words[:3],
        "-d",
        "in_asm",
        "-D",
        str(log),
        *runner_args,
        "--num_executions=1",
        "--warmup=0",
        f"--maps_path={maps}",
    ]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
    return KernelTrace.from_names(translated_functions(log, maps)).sme_kernels


@needs_emulation
def test_a_real_cpu_without_sme2_is_not_given_the_native_runner(tmp_path: Path) -> None:
    machine = _qemu_machine(tmp_path, "max,sme=off")
    assert "sve2" in machine.cpu.features and not machine.cpu.has_sme2
    chosen = auto.current_plan(machine)
    assert chosen.target == "emulated"  # set up here, so SME2 on and off still run (under emulation)
