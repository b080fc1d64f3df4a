"""The linux-aarch64 runner build, run under qemu-aarch64 (Debian's qemu-user).

This is where the one-build SME2-off mode is verified for real: qemu's
``-cpu max`` exposes SME, XNNPACK then picks packed (PF32) KleidiAI kernels,
and the preload library must make the same binary pick exactly the kernels of
``-cpu max,sme=off``. .ci/run installs g++-aarch64-linux-gnu and qemu-user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers_versions import needs_runtime_libraries

from conftest import REPO
from pytest_sme2 import Profile, Recipe
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup as emulation
from pytest_sme2.run.call_plan import native_calls
from pytest_sme2.run.native.build import build_mask_library, build_runner
from pytest_sme2.run.native.tensorfile import read_tensors

# Prefer the emulated target's qemu 11.1 (SME and SME2, so the mask must hide both); Debian's
# qemu-user (7.2 on bookworm: SME only) still exercises the SME bits.
_STATUS = emulation.status()
QEMU = str(_STATUS.qemu) if _STATUS.ready else shutil.which("qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")
# The runner links the wheel's C++ runtime libraries: on executorch 1.4.1 (none) every test here skips, naming why.
pytestmark = [
    pytest.mark.skipif(
        QEMU is None or shutil.which("aarch64-linux-gnu-g++") is None or not SYSROOT.exists(),
        reason="needs qemu-aarch64 and the aarch64 cross compiler: apt-get install qemu-user g++-aarch64-linux-gnu",
    ),
    needs_runtime_libraries,
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    previous = os.environ.get("PYTEST_SME2_RUNNER_CACHE")
    os.environ["PYTEST_SME2_RUNNER_CACHE"] = str(tmp_path_factory.mktemp("aarch64-runner"))
    try:
        yield build_runner("linux-aarch64"), build_mask_library("linux-aarch64")
    finally:
        if previous is None:
            os.environ.pop("PYTEST_SME2_RUNNER_CACHE", None)
        else:
            os.environ["PYTEST_SME2_RUNNER_CACHE"] = previous


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, shared_export_cache: Path) -> Sme2Session:
    root = tmp_path_factory.mktemp("aarch64")
    sess = Sme2Session(Settings(target="host", cache_dir=shared_export_cache, session_dir=root / "artifacts"))
    sess.registry.register_dir(REPO / "models")
    return sess


def _run(runner: Path, pte: Path, inputs_pt: Path, out: Path, cpu: str, preload: Path | None = None) -> Profile:
    out.mkdir(parents=True, exist_ok=True)
    inputs = native_calls(inputs_pt, out / "inputs.bin").inputs
    command = [QEMU, "-cpu", cpu]
    if preload is not None:
        command += ["-E", f"LD_PRELOAD={preload}"]  # set in the guest, not in qemu itself
    command += [
        str(runner),
        f"--model_path={pte}",
        f"--etdump_path={out / 'timed.etdp'}",
        f"--inputs_path={inputs}",
        f"--outputs_path={out / 'outputs.bin'}",
        "--num_executions=1",
        "--warmup=0",
        "--cpu_threads=1",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "QEMU_LD_PREFIX": str(SYSROOT)}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "PYTEST_SME2_RESULT" in result.stdout
    return Profile.from_etdump(out / "timed.etdp")


def _heavy_kinds(profile: Profile) -> set[str]:
    ops = profile.ops
    return set(ops.loc[ops["category"].isin(["CONV", "GEMM"]), "op"])


@pytest.mark.parametrize("model", ["toy_cnn", "mobilenet_v3_small"])
def test_aarch64_runner_takes_the_sme_path_and_masking_removes_it(
    built: tuple[Path, Path], session: Sme2Session, model: str, tmp_path: Path
) -> None:
    runner, mask = built
    exported = session.export(model, Recipe())
    on = _run(runner, exported.path, exported.inputs_path, tmp_path / "on", "max")
    if not on.sme_path_ops:
        pytest.skip(
            f"{subprocess.run([QEMU, '--version'], capture_output=True, text=True).stdout.split(chr(10))[0]} "
            "exposes no SME to XNNPACK"
        )
    masked = _run(runner, exported.path, exported.inputs_path, tmp_path / "masked", "max", preload=mask)
    sme_off = _run(runner, exported.path, exported.inputs_path, tmp_path / "off", "max,sme=off")
    assert on.sme_path_share > 0.5
    assert any("PF32" in kind for kind in _heavy_kinds(on))
    assert masked.sme_path_share == 0.0 and masked.sme_path_ops == 0
    assert _heavy_kinds(masked) == _heavy_kinds(sme_off)
    reference = torch.load(exported.reference_outputs_path, weights_only=True)
    for out in ("on", "masked"):
        produced = torch.from_numpy(read_tensors(tmp_path / out / "outputs.bin")[0].copy())
        torch.testing.assert_close(produced, reference, rtol=1e-4, atol=1e-5)
