"""pytest-sme2's own aarch64 runner on an Android-like arm64 device with no NDK build (issue 27, item 1).

The stand-in device is an arm64 phone as closely as this machine allows: its aarch64 programs run under
qemu-aarch64 11.1 (SME2 in its CPU when the device has it), no aarch64 glibc is visible to them (empty folders
over every one of this machine's), and its shell runs the target's commands from a /data/local/tmp of its own.
Everything the runner loads is what the adb target pushed: its loader, the C and C++ libraries and executorch's.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path
from typing import Iterator

import pytest
import torch
from adb_standin import AARCH64_GLIBC_DIRS, DEVICE_TMP, AdbStandin, StandinDevice, namespaces_available, session_ini
from helpers_versions import needs_runtime_libraries

from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets import RunSpec

STATUS = emulation_setup.status()


def _arm64_device_problem() -> str | None:
    """None when the stand-in can make an arm64 device here, else why not."""
    if namespaces_available() is not None:
        return namespaces_available()
    if not STATUS.ready:
        return f"emulated target not ready: {STATUS.problem}"
    if STATUS.log_qemu is None:
        return "the stand-in phone runs qemu-user 11.1 (its in_asm log disassembles): run `pytest-sme2 setup-emulation`"
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "/bin/sh",
            "-c",
            "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        return (
            "the arm64 stand-in device needs a binfmt_misc of its own in a user namespace (Linux 6.7+): "
            f"{probe.stderr.decode(errors='replace').strip()}"
        )
    return None


# The runner links the wheel's C++ runtime libraries: on executorch 1.4.1 (none) every test here skips, naming why.
pytestmark = [
    pytest.mark.skipif(_arm64_device_problem() is not None, reason=str(_arm64_device_problem())),
    needs_runtime_libraries,
]


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[AdbStandin]:
    with AdbStandin(tmp_path / "standin") as server:
        yield server


def _arm64_phone(standin: AdbStandin, serial: str = "X300STANDIN") -> StandinDevice:
    # qemu-user 11.1, not the plugin-capable build: the tests read instruction names (smstart, fmopa) from its in_asm
    # log, and only Debian's package is built with the disassembler (the source build prints bytes, "OBJD-T: ...").
    return standin.add_device(
        serial, sme2=True, abi="arm64-v8a", model="X300 Standin", soc="Dimensity Standin", emulator=STATUS.log_qemu
    )


def _translated(device: StandinDevice, pid_logs: set[Path]) -> str:
    """The code qemu translated for the runner processes whose logs are not in ``pid_logs`` yet."""
    new = sorted(set(device.qemu_logs.glob("qemu-*.log")) - pid_logs)
    pid_logs.update(new)
    return "".join(path.read_text(errors="replace") for path in new)


def test_own_aarch64_runner_runs_on_a_phone_without_glibc_sme2_on_and_off(
    standin: AdbStandin, exported_toy_cnn, tmp_path: Path
) -> None:
    device = _arm64_phone(standin)
    # The device itself has no aarch64 glibc: its shell sees empty folders where this machine keeps them.
    listing = subprocess.run(
        device.shell_argv(f"ls -A {' '.join(AARCH64_GLIBC_DIRS)}")[0],
        capture_output=True,
        text=True,
        env=device.shell_argv("true")[1],
    )
    assert listing.returncode == 0 and not [
        line for line in listing.stdout.splitlines() if line and not line.endswith(":")
    ]
    session = Sme2Session(
        Settings(
            target="adb:X300STANDIN",
            cache_dir=tmp_path / "cache",
            session_dir=tmp_path / "artifacts",
            target_options={"adb_server": standin.address},
        )
    )
    seen: set[Path] = set()
    try:
        on = Runner(session, RunSpec(sme2=True, runs=2, warmup=1, max_rounds=1), session.test_dir("on")).profile(
            exported_toy_cnn
        )
        on_code = _translated(device, seen)
        off = Runner(session, RunSpec(sme2=False, runs=2, warmup=1, max_rounds=1), session.test_dir("off")).profile(
            exported_toy_cnn
        )
        off_code = _translated(device, seen)
        pushed = sorted(p.name for p in device.root.glob("pytest-sme2-*/bin-*/*"))
    finally:
        session.close()
    # No runner option, no NDK: the target chose pytest-sme2's linux-aarch64 runner and pushed its loader and
    # every library it loads; SME2 off preloaded the aarch64 masking library.
    assert on.metadata["target"]["details"]["runner_on"] == str(STATUS.runner)
    for name in (
        "sme2_runner",
        "ld-linux-aarch64.so.1",
        "libc.so.6",
        "libstdc++.so.6",
        "libexecutorch.so",
        "libsme2_mask.so",
    ):
        assert name in pushed
    commands = [run.command for run in device.runs]
    assert len(commands) == 2 and all("/ld-linux-aarch64.so.1 --library-path " in c for c in commands)
    assert "LD_PRELOAD=" not in commands[0] and "libsme2_mask.so" in commands[1]
    # The runner ran as aarch64 code (qemu translated it), with KleidiAI's SME2 kernels for SME2 on and none off.
    assert on_code and off_code
    assert re.search(r"\bsmstart\b", on_code) and re.search(r"\bfmopa\b", on_code)
    assert not re.search(r"\b(smstart|fmopa|smopa)\b", off_code)
    assert on.metadata["sme2_active"] is True and off.metadata["sme2_active"] is False
    reference = torch.load(exported_toy_cnn.reference_outputs_path, weights_only=True)
    for profile in (on, off):
        outputs = torch.load(profile.artifacts["outputs"], weights_only=True)
        torch.testing.assert_close(outputs[0], reference, rtol=1e-3, atol=1e-4)
    assert [run.exit_code for run in device.runs] == [0, 0]
    assert list(device.root.iterdir()) == []  # the session folder is removed at close


def test_plugin_session_on_the_arm64_phone_needs_no_runner_option(
    pytester: pytest.Pytester, standin: AdbStandin, shared_export_cache: Path
) -> None:
    device = _arm64_phone(standin, "emulator-5560")
    pytester.makeini(session_ini(standin, shared_export_cache, runs=2))
    pytester.makepyfile(
        textwrap.dedent("""
        @__import__("pytest").mark.model("toy_cnn")
        def test_on_off(exported_pte, runner, etdump_profile):
            on = etdump_profile(exported_pte, runner(sme2=True))
            off = etdump_profile(exported_pte, runner(sme2=False))
            assert on.metadata["target"]["details"]["abi"] == "arm64-v8a"
            assert on.metadata["sme2_active"] and not off.metadata["sme2_active"]
        """)
    )
    result = pytester.runpytest_inprocess("--sme2-target=adb:emulator-5560", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert [run.exit_code for run in device.runs] == [0, 0]
    assert all(f"{DEVICE_TMP}/pytest-sme2-" in run.command for run in device.runs)


def test_doctor_checks_the_phone_and_starts_the_runner_there(
    standin: AdbStandin, capsys: pytest.CaptureFixture
) -> None:
    from pytest_sme2.cli import main

    _arm64_phone(standin, "R3CX300")
    # An arm64 device whose kernel cannot execute the pushed program (no emulator behind it here): what a phone
    # refusing the carried loader looks like to the user.
    standin.add_device("R3CREFUSE", sme2=True, abi="arm64-v8a", model="Locked Phone")
    assert main(["doctor", "--sme2-target=adb:R3CX300", "--sme2-adb-server", standin.address]) in (0, 1)
    out = capsys.readouterr().out
    lines = {
        m.group(2): f"{m.group(1)} {m.group(3)}"
        for m in re.finditer(r"(?m)^\s*(ok|info|MISSING)  (.+?)\s{2,}(.*)$", out)
    }
    assert lines["device ABI"].split()[0] == "ok" and "arm64-v8a (aarch64)" in lines["device ABI"]
    assert lines["device SME2"].split()[0] == "ok"
    assert "device kernel" in lines
    for side in ("on", "off"):
        assert lines[f"runner starts (SME2 {side})"].split()[0] == "ok"
        assert "pytest-sme2 runner executorch=1.5.1" in lines[f"runner starts (SME2 {side})"]
    assert main(["doctor", "--sme2-target=adb:R3CREFUSE", "--sme2-adb-server", standin.address]) == 1
    out = capsys.readouterr().out
    refused = [line for line in out.splitlines() if "runner starts (SME2 on)" in line]
    assert refused and refused[0].split()[0] == "MISSING"
    assert "the runner did not start on device R3CREFUSE" in out and "--sme2-runner" in out
    assert "docs/targets.md" in out


def test_llm_with_executorch_custom_ops_on_a_phone(
    standin: AdbStandin, shared_export_cache: Path, tmp_path: Path
) -> None:
    """A language model as ExecuTorch ships it (its LLM custom ops) on an arm64 phone: the kernel kit travels
    with the runner, and the last decode step's logits are the eager model's after the same prompt and steps
    (the cache filled by ExecuTorch's own update_cache kernel, attention by its custom_sdpa)."""
    from helpers_llm import adb_llm_phases, eager_sequence, last_output

    from pytest_sme2.measure.llm import LlmSequence

    _arm64_phone(standin, "LLMPHONE")
    sequence = LlmSequence(prefill=6, decode=2)
    phases, model = adb_llm_phases(
        standin.address,
        "LLMPHONE",
        shared_export_cache,
        tmp_path / "artifacts",
        "tiny_llama",
        sequence,
        RunSpec(runs=2, warmup=1, max_rounds=1),
    )
    torch.testing.assert_close(last_output(phases.decode), eager_sequence(model, sequence)[1], rtol=1e-4, atol=1e-4)
    kinds = set(phases.decode.ops["kind"])
    assert {"llama::custom_sdpa", "llama::update_cache"} <= kinds
    # The kit was pushed in its own layout under the session's folder on the device.
    logs = (tmp_path / "artifacts").rglob("runner.log")
    assert any("--kernel_library=" in log.read_text() and "/kit-" in log.read_text() for log in logs)
