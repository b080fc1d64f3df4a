"""Kernel time on real runs (issue 14): the native runner under real Linux perf, real models, real ETDumps.

The check that matters: the samples placed in an operator add up to the operator's own ETDump
time (the same round's), within sampling error. Both are measured; neither is copied from the code.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import textwrap
from pathlib import Path

import pytest
from helpers_versions import needs_runtime_libraries

from conftest import REPO, TINY_MODEL
from pytest_sme2.evidence.perf_samples import permission_problem

pytestmark = [
    pytest.mark.skipif(
        shutil.which("perf") is None, reason="Linux perf is not installed: apt-get install linux-perf (Debian)"
    ),
    pytest.mark.skipif(permission_problem() is not None, reason=f"perf not permitted: {permission_problem()}"),
    needs_runtime_libraries,
]

INNER = """
import pytest

@pytest.mark.model({model!r}, dtype={dtype!r})
def test_profile(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def _project(pytester: pytest.Pytester, cache: Path, model: str, dtype: str) -> None:
    models = pytester.mkdir("models")
    (models / "tiny.py").write_text(TINY_MODEL)
    for bundled in ("mobilenet_v3_small.py", "mlp.py"):
        shutil.copy(REPO / "models" / bundled, models / bundled)
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        sme2_model_dirs = models
        sme2_target = local
        sme2_cache_dir = {cache}
        sme2_max_rounds = 1
        """)
    )
    pytester.makepyfile(test_inner=INNER.format(model=model, dtype=dtype))


def _kernel_time(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest_inprocess(
        "--sme2-no-baselines", "--sme2-artifacts-dir=artifacts", "-p", "no:cacheprovider", *args
    )
    [summary] = (pytester.path / "artifacts").glob("session-*/summary.json")
    [profile] = json.loads(summary.read_text())["tests"][0]["profiles"]
    return result, profile["kernel_time"]


# Samples count the runner's CPU time, ETDump its wall time: a runner preempted for less than what leaves a run out
# loses samples, not time. Beside `with-load 2` (stop 51, 200 runs) the convolutions had 731 samples for 846
# (-14%); alone, within a few percent.
LOST_TO_PREEMPTION = 0.2


@pytest.mark.xdist_group("long_runners")  # its runner must not be taken for test_interrupt's
def test_mobilenet_convolutions_time_is_attributed_to_xnnpack_kernels_and_adds_up(
    pytester: pytest.Pytester, shared_export_cache: Path
) -> None:
    _project(pytester, shared_export_cache, "mobilenet_v3_small", "fp32")
    result, kernel_time = _kernel_time(pytester, "--sme2-kernel-sampling=on", "--sme2-runs=200")
    result.assert_outcomes(passed=1)
    assert kernel_time["available"], kernel_time.get("problem")
    assert kernel_time["sampler"].startswith("perf record")
    # a run in which the runner lost its core is left out (beside busy jobs 1 of 40, beside three 19), never lost
    assert kernel_time["runs"] + kernel_time["runs_left_out"] == 200 and kernel_time["runs"] >= 60, kernel_time["runs"]
    period_ms = kernel_time["period_ns"] / 1e6
    runs = kernel_time["runs"]
    ops = [op for op in kernel_time["ops"] if not op["event"].startswith("(")]
    convolutions = [op for op in ops if op["category"] == "CONV"]
    assert len(convolutions) >= 10, [op["event"] for op in ops]
    checked, misses = 0, []
    for op in convolutions:
        # every convolution's time goes to functions of XNNPACK's library, named where it has a symbol and
        # by function address range where the wheel ships none
        top = op["kernels"][0]
        assert top["library"] == "libexecutorch_backend_xnnpack.so", op
        assert top["kind"] in ("unnamed", "x86 SIMD", "NEON", "SME", "SME2"), op
        assert not top["kernel"].endswith("@0x?"), op  # a symbol or an address range, never "somewhere in it"
        expected = op["etdump_ms_per_run"] * runs / period_ms  # samples the ETDump time stands for
        if expected >= 20:
            # three standard deviations of a sample count, a few samples for the edges of events, and the CPU time
            # a runner preempted for less than a left-out run loses (LOST_TO_PREEMPTION)
            tolerance = 3 * math.sqrt(expected) + 4 + LOST_TO_PREEMPTION * expected
            if abs(op["samples"] - expected) > tolerance:
                misses.append((op["event"], op["samples"], expected))
            checked += 1
    # One operator may miss: a preemption inside it (the run itself not slowed enough to be left out) lengthens its
    # ETDump time and not its samples (a rehearsal beside the other xdist worker: DWConv #10 had 23 samples where
    # its ETDump time stood for 53); a timeline or attribution fault moves many, and the sum below must hold too.
    assert len(misses) <= 1, misses
    # How many convolutions carry 20 expected samples depends on the runs kept: 5 or more with 40 runs, 3 with the
    # 21 a run beside three busy jobs kept (19 left out where the runner lost its core). The first, 0.4 ms/run
    # IGEMM carries 80 or more samples in any 20 runs; the convolutions together must match as well.
    assert checked >= 1
    expected_all = sum(op["etdump_ms_per_run"] for op in convolutions) * runs / period_ms
    sampled_all = sum(op["samples"] for op in convolutions)
    assert abs(sampled_all - expected_all) <= 3 * math.sqrt(expected_all) + 4 + LOST_TO_PREEMPTION * expected_all, (
        sampled_all,
        expected_all,
    )
    # Sample counts follow durations wherever the samples are placed; which kernel they name does not. Each
    # convolution or GEMM runs one kernel, so a misplaced timeline mixes neighbours' kernels into an operator.
    # Measured in stop 38 over 26-31 such operators: with the timeline right, the median top-kernel share was
    # 0.975-1.0 in 5 runs (3 beside two busy jobs); with the samples moved by +5 / +10 / +20 / -40 us it was
    # 0.949 / 0.853 / 0.631 / 0.721 (caught); -20 us gave 0.875, 0.913 and 0.974 (caught in 2 of 3), -10 us 1.0.
    # The median, not the mean: a few short operators at 0.6-0.8 pulled the mean to 0.918 in a CI run and to
    # 0.932 here with the timeline right, where the old mean >= 0.93 check failed or nearly did. 200 runs, not 60:
    # on stop 51's machine the heaviest operators got 20-48 samples in 60 runs, one misplaced sample being 2-5% of
    # a share, and the median came out 0.907-0.947 in 6 runs alone (failing); with 200, 0.958-0.981 in 4.
    heavy = [op for op in ops if op["category"] in ("CONV", "GEMM") and op["samples"] >= 20]
    # mobilenet's 1x1 convolutions run as XNNPACK GEMMs, some in assembly kernels without unwind entries
    assert not [op["event"] for op in heavy if op["kernels"][0]["kernel"].endswith("@0x?")]
    assert statistics.median(op["kernels"][0]["share"] for op in heavy) >= 0.95, [
        (op["event"], op["kernels"][0]["share"]) for op in heavy
    ]
    sampled = sum(op["sampled_ms_per_run"] for op in kernel_time["ops"])
    etdump = sum(op["etdump_ms_per_run"] for op in kernel_time["ops"])
    # within 5%, but for the CPU time a preempted runner loses (samples are only ever lost to it, never gained)
    assert etdump * (1 - 0.05 - LOST_TO_PREEMPTION) <= sampled <= etdump * 1.05, (sampled, etdump)


@pytest.mark.xdist_group("long_runners")
def test_fp16_gemms_are_attributed_to_named_f16_kernels(pytester: pytest.Pytester, shared_export_cache: Path) -> None:
    _project(pytester, shared_export_cache, "mlp", "fp16")
    result, kernel_time = _kernel_time(pytester, "--sme2-kernel-sampling=on", "--sme2-runs=40")
    result.assert_outcomes(passed=1)
    assert kernel_time["available"], kernel_time.get("problem")
    gemms = [op for op in kernel_time["ops"] if op["category"] == "GEMM" and op["samples"] >= 10]
    assert gemms, kernel_time["ops"]
    for op in gemms:
        top = op["kernels"][0]
        assert top["kernel"].startswith("xnn_f16_") and "ukernel" in top["kernel"], op
        assert top["share"] >= 0.5, op
    assert set(kernel_time["dominant_kernels"].values()) <= {op["kernels"][0]["kernel"] for op in kernel_time["ops"]}


FAILING_PERF = """#!/bin/sh
# runs the program, then fails the way a crashing perf does, leaving no data
while [ "$1" != "--" ]; do shift; done; shift
"$@" > /dev/null
echo "perf: Segmentation fault" >&2
exit 139
"""


@pytest.mark.parametrize("fault", ["missing", "crashes"])
def test_a_missing_or_failing_sampler_leaves_the_profile_without_kernel_time_and_says_why(
    pytester: pytest.Pytester, shared_export_cache: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    _project(pytester, shared_export_cache, "tiny", "fp32")
    if fault == "missing":
        monkeypatch.setattr("pytest_sme2.evidence.perf_samples.shutil.which", lambda name: None)
    else:
        fake = pytester.mkdir("fakebin") / "perf"
        fake.write_text(FAILING_PERF)
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake.parent}:{__import__('os').environ['PATH']}")
    result, kernel_time = _kernel_time(
        pytester,
        "--sme2-kernel-sampling=on",
        "--sme2-runs=3",
        "-W",
        "default::pytest_sme2.errors.KernelSamplingWarning",
    )
    result.assert_outcomes(passed=1)  # the test and its profile stand
    assert kernel_time["available"] is False
    expected = (
        "apt-get install linux-perf" if fault == "missing" else "the sampled process failed: .*exited with status 139"
    )
    assert __import__("re").search(expected, kernel_time["problem"]), kernel_time["problem"]
    result.stdout.fnmatch_lines(["*KernelSamplingWarning*no kernel time for*"])


def test_sampling_settings_are_checked_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--sme2-kernel-sampling=on", "--sme2-kernel-sampling-hz=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--sme2-kernel-sampling-hz=0.0 is invalid: it must be a number of samples per " "second > 0*"]
    )
    result = pytester.runpytest("--sme2-kernel-sampling=on", "--sme2-symfs=no/such/folder")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sme2-symfs (or ini sme2_symfs) *no/such/folder is not a folder*"])
