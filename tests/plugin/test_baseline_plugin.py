"""pytester tests of the baseline gate on a real tiny model: the whole update/compare flow.

Latency and share tolerances are widened in these projects where a rerun must
pass (a 30 us model's timing on a shared machine says little); structural
verdicts and the instruction metric are exact and keep their defaults.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers_gate import UPDATE, _test_file

from pytest_sme2.gate import baselines
from pytest_sme2.gate.baselines import SCHEMA_VERSION


@pytest.fixture(autouse=True)
def _baseline_gate_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These inner runs test the gate: undo conftest's --sme2-no-baselines."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def _baseline_files(project: pytest.Pytester) -> list[Path]:
    return sorted((project.path / "baselines").rglob("*.json"))


WEIRD_IDS = """
import pytest

@pytest.mark.baseline(latency=5.0, shares=0.5)
@pytest.mark.model("tiny")
@pytest.mark.parametrize("case", ["a/b", "a_b", "$(touch x)", "`touch x`"])
def test_weird(case, exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def test_ids_that_clean_alike_get_their_own_baselines_and_artifacts(sme2_project: pytest.Pytester) -> None:
    """test_weird[a/b] and test_weird[a_b] once shared one file: the update overwrote one with the other."""
    sme2_project.makepyfile(test_gate=WEIRD_IDS)
    update = sme2_project.runpytest_inprocess(*UPDATE)
    update.assert_outcomes(passed=4)
    files = _baseline_files(sme2_project)
    assert len(files) == 4 and not (sme2_project.path / "x").exists()  # nothing ran in a shell
    owners = {json.loads(path.read_text())["test"] for path in files}
    assert owners == {f"test_gate.py::test_weird[{case}]" for case in ("a/b", "a_b", "$(touch x)", "`touch x`")}
    sme2_project.runpytest_inprocess().assert_outcomes(passed=4)
    sessions = [p for p in (sme2_project.path / ".sme2" / "artifacts").iterdir() if p.is_dir()]
    test_dirs = {p.name for session in sessions for p in session.iterdir() if p.name.startswith("test_gate")}
    assert len(test_dirs) == 4


def test_a_baseline_under_its_old_name_is_read_then_moved_by_the_update(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    old = path.with_name("test_gate.py_test_tiny.json")  # the name pytest-sme2 gave it before
    assert old == baselines.legacy_baseline_path(path.parent.parent, path.parent.name, "test_gate.py::test_tiny")
    path.rename(old)
    sme2_project.runpytest_inprocess().assert_outcomes(passed=1)  # judged against the old file, not "missing"
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    assert _baseline_files(sme2_project) == [path]


def test_an_update_never_overwrites_another_tests_file(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    data = json.loads(path.read_text())
    data["test"] = "test_other.py::test_someone_else"
    path.write_text(json.dumps(data))
    result = sme2_project.runpytest_inprocess(*UPDATE)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*baseline not written to *that file belongs to test 'test_other.py::test_someone_else'*"]
    )
    assert json.loads(path.read_text())["test"] == "test_other.py::test_someone_else"


def test_missing_baseline_fails_with_update_command_then_update_and_rerun_pass(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    first = sme2_project.runpytest_inprocess()
    first.assert_outcomes(failed=1)
    text = first.stdout.str()
    assert "no baseline for tiny fp32-xnnpack" in text
    assert "pytest test_gate.py::test_tiny --sme2-update-baselines" in text
    assert "if the change is intended" not in text  # nothing changed: there is nothing to compare yet
    assert _baseline_files(sme2_project) == []

    update = sme2_project.runpytest_inprocess(*UPDATE)
    update.assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    assert path.parent.name.startswith("host-") and path.name.startswith("test_gate.py_test_tiny~")
    assert path == baselines.baseline_path(sme2_project.path / "baselines", path.parent.name, "test_gate.py::test_tiny")
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA_VERSION and data["test"] == "test_gate.py::test_tiny"
    [record] = data["profiles"].values()
    samples = json.loads((sme2_project.path / "samples_tiny.json").read_text())
    assert record["samples_ms"] == pytest.approx(samples, rel=1e-5)
    assert record["provenance"]["executorch"] and len(record["provenance"]["model_source_hash"]) == 64
    assert record["delegation_coverage"] > 0.5 and record["portable_ops"] == []
    assert "1 written" in update.stdout.str()

    rerun = sme2_project.runpytest_inprocess("-rA")
    rerun.assert_outcomes(passed=1)
    assert "[ok]" in rerun.stdout.str() and "0 regression(s)" in rerun.stdout.str()
    # issue 65: a clean re-run's line counted written, refused, regressions and missing, never the file that held
    rerun.stdout.fnmatch_lines(["*1 baseline file(s) (*): 0 written, 0 refused, 1 ok, 0 regression(s), *0 missing"])
    update.stdout.fnmatch_lines(["*1 baseline file(s) (*): 1 written, 0 refused, 0 ok, *"])


def test_missing_policy_skip_and_warn(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    skipped = sme2_project.runpytest_inprocess("-o", "sme2_baseline_missing=skip", "-rs")
    skipped.assert_outcomes(skipped=1)
    assert "--sme2-update-baselines" in skipped.stdout.str()
    # a user's trial: the update command dropped --sme2-baselines-dir, so following it wrote to ./baselines
    elsewhere = sme2_project.runpytest_inprocess(
        "-o", "sme2_baseline_missing=skip", "-rs", "--sme2-baselines-dir=perf baselines"
    )
    elsewhere.assert_outcomes(skipped=1)
    assert "--sme2-update-baselines --sme2-baselines-dir='perf baselines'" in elsewhere.stdout.str()
    # shown even where UserWarnings are ignored, as this repository's own pyproject does for torch's noise
    warned = sme2_project.runpytest_inprocess(
        "-o", "sme2_baseline_missing=warn", "-W", "ignore::UserWarning", "-W", "default::pytest_sme2.errors.Sme2Warning"
    )
    warned.assert_outcomes(passed=1, warnings=1)
    assert "MissingBaselineWarning: test_gate.py::test_tiny: no baseline for tiny" in warned.stdout.str()
    bad = sme2_project.runpytest_inprocess("-o", "sme2_baseline_missing=maybe")
    assert "sme2_baseline_missing = 'maybe'" in bad.stderr.str()


def test_structurally_different_model_is_flagged(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    # The same test, now exported without the XNNPACK partitioner: everything falls out of the delegate.
    text = _test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("tiny", partitioner="none")')
    sme2_project.makepyfile(test_gate=text)
    result = sme2_project.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "delegated share of graph nodes dropped from 100.0% to 0.0%" in out
    # each node delegated in the baseline is named by what it is in the graph, and the kernels that now run them
    fell_out = next(line for line in out.splitlines() if "node(s) fell out of the delegate: " in line)
    assert ": aten.convolution.default" in fell_out
    assert "portable kernel(s) new to the program: " in fell_out and "native_call_convolution.out" in fell_out
    assert (
        "since the baseline was recorded: recipe dtype=fp32, partitioner=xnnpack, quant=None then, "
        "dtype=fp32, partitioner=none, quant=None now" in out
    )
    assert (
        "if the change is intended, update the baseline: pytest test_gate.py::test_tiny --sme2-update-baselines" in out
    )
    # from a subfolder the node id is still the rootdir's: the command says where to run it (a model author's trial:
    # pasted in the subfolder, it found no test)
    sub = sme2_project.mkdir("sub")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        there = sme2_project.runpytest_inprocess(str(sme2_project.path / "test_gate.py"))
    there.assert_outcomes(failed=1)
    assert (
        f"update the baseline: cd {sme2_project.path} && pytest test_gate.py::test_tiny --sme2-update-baselines"
        in there.stdout.str()
    )


def test_unused_baselines_are_listed_and_corrupt_ones_fail_without_being_overwritten(
    sme2_project: pytest.Pytester,
) -> None:
    extra = textwrap.dedent(
        """

        @pytest.mark.baseline(latency=5.0, shares=0.5)
        @pytest.mark.model("tiny")
        def test_old(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())
        """
    )
    sme2_project.makepyfile(test_gate=_test_file(extra=extra), test_gone=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=3)
    assert len(_baseline_files(sme2_project)) == 3
    # one test of the file chosen by node id: its sibling's baseline is not called orphaned (it was not collected)
    narrowed = sme2_project.runpytest_inprocess("test_gate.py::test_tiny")
    narrowed.assert_outcomes(passed=1)
    assert "unused baseline" not in narrowed.stdout.str() and "no longer exists" not in narrowed.stdout.str()
    sme2_project.makepyfile(test_gate=_test_file())  # test_old was deleted
    (sme2_project.path / "test_gone.py").unlink()  # and a whole test file (a user's trial: it was not listed)
    result = sme2_project.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "2 unused baseline(s)" in out
    assert re.search(
        r"test_gate\.py_test_old~[0-9a-f]{12}\.json \(test test_gate\.py::test_old no longer exists\)", out
    )
    assert re.search(
        r"test_gone\.py_test_tiny~[0-9a-f]{12}\.json \(its test file test_gone\.py no longer exists\)", out
    )

    path = next(p for p in _baseline_files(sme2_project) if p.name.startswith("test_gate.py_test_tiny~"))
    path.write_text('{"schema": 1, "test": "test_gate.py::test_tiny", ')  # hand-broken
    broken = sme2_project.runpytest_inprocess()
    broken.assert_outcomes(failed=1)
    assert f"BaselineError: baseline {path} cannot be used: not valid JSON" in broken.stdout.str()
    assert path.read_text() == '{"schema": 1, "test": "test_gate.py::test_tiny", '
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)

    data = json.loads(path.read_text())  # a real record with one field of the wrong type (a bad merge)
    [label] = data["profiles"]
    data["profiles"][label]["shares"] = "abc"
    path.write_text(json.dumps(data))
    wrong = sme2_project.runpytest_inprocess()
    wrong.assert_outcomes(failed=1)
    out = wrong.stdout.str()
    assert f"BaselineError: baseline {path} cannot be used: profiles[{label!r}].shares must be an object" in out
    assert "AttributeError" not in out and "Traceback" not in out
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    assert json.loads(path.read_text())["schema"] == SCHEMA_VERSION


def test_marker_can_disable_the_gate_and_rejects_unknown_arguments(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(
        test_gate="""
        import pytest

        @pytest.mark.baseline(enabled=False)
        @pytest.mark.model("tiny")
        def test_off(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner())

        @pytest.mark.baseline(latncy=0.1)
        @pytest.mark.model("tiny")
        def test_typo(exported_pte, runner, etdump_profile):
            raise AssertionError("a wrong marker errors in setup: the body never runs")

        @pytest.mark.baseline(latency=-1, shares="x")
        @pytest.mark.model("tiny")
        def test_values(exported_pte, runner, etdump_profile):
            raise AssertionError("a wrong marker errors in setup: the body never runs")

        @pytest.mark.skip(reason="skipped by its own mark")
        @pytest.mark.baseline(latncy=0.1)
        def test_skipped():
            pass
        """
    )
    result = sme2_project.runpytest_inprocess("--strict-markers")
    # errors in setup, before the fixtures export or run (a user's trial: found only after the emulated runs);
    # a test skipped by its own mark is skipped first, whatever its baseline marker says
    result.assert_outcomes(passed=1, errors=2, skipped=1)
    out = result.stdout.str()
    assert "@pytest.mark.baseline got unknown argument(s) latncy" in out and "body never runs" not in out
    assert "latency=-1 (use a number >= 0), shares='x' (use a number >= 0) are invalid" in out  # both at once


def test_profiles_become_pytest_benchmark_results(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest-benchmark switches itself off inside xdist workers; the inner run here is not one
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    sme2_project.makepyfile(test_gate=_test_file())
    result = sme2_project.runpytest_inprocess("--benchmark-json=bench.json", "-o", "sme2_baselines=false")
    result.assert_outcomes(passed=1)
    data = json.loads((sme2_project.path / "bench.json").read_text())
    [bench] = data["benchmarks"]
    assert bench["fullname"].startswith("test_gate.py::test_tiny[tiny fp32-xnnpack [host")
    samples = json.loads((sme2_project.path / "samples_tiny.json").read_text())
    assert [x * 1000 for x in bench["stats"]["data"]] == pytest.approx(samples)
    assert bench["stats"]["rounds"] == len(samples) == 5
    assert bench["extra_info"]["sme2_timer"] == "ETDump Method::execute"
    # and --benchmark-compare reads what --benchmark-autosave stored
    sme2_project.runpytest_inprocess("--benchmark-autosave", "-o", "sme2_baselines=false").assert_outcomes(passed=1)
    compared = sme2_project.runpytest_inprocess("--benchmark-compare", "-o", "sme2_baselines=false")
    compared.assert_outcomes(passed=1)
    assert "0001_" in compared.stdout.str()


def test_compare_variants_alternates_chunks_and_merges_them(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(
        test_pair="""
        from pathlib import Path
        import pytest

        @pytest.mark.baseline(enabled=False)
        @pytest.mark.perf(runs=4, warmup=1)
        @pytest.mark.model("tiny")
        def test_pair(exported_pte, runner, compare_variants):
            a, b = compare_variants(exported_pte, runner(threads=1), runner(threads=2), rounds=2)
            assert a.runs == 4 and b.runs == 4 and a.metadata["chunks"] == 2
            assert a.variant.endswith("threads=1") and b.variant.endswith("threads=2")
            etdumps = [Path(p) for x in (a, b) for p in x.artifacts.values() if p.endswith("timed.etdp")]
            in_time_order = sorted(etdumps, key=lambda p: p.stat().st_mtime_ns)
            assert ["threads=1~" in p.parent.name for p in in_time_order] == [True, False, True, False]
            speedup = a.speedup_over(b)
            assert speedup.low <= speedup.value <= speedup.high
            assert a.speedup_over(b) == speedup  # seeded bootstrap: reproducible
        """
    )
    sme2_project.runpytest_inprocess().assert_outcomes(passed=1)


# A model with a few million instructions per inference: on the 16x16 tiny model (84k per
# inference) a few hundred instructions of environment-dependent start-up work (malloc and
# memcpy paths) that do not cancel between the N- and 1-inference runs moved the count by
# up to 1.5% between two unchanged runs in a fresh virtualenv.
GATE_MODEL = """
import torch

def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU(),  # EXTRA
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).eval()

def get_example_inputs():
    return (torch.ones(1, 3, 64, 64),)
"""


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="needs valgrind: `make system-deps` or apt-get install valgrind"
)
def test_instruction_metric_catches_an_extra_operator(sme2_project: pytest.Pytester) -> None:
    model = sme2_project.path / "models" / "gate.py"
    model.write_text(GATE_MODEL)
    sme2_project.makepyfile(test_gate=_test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("gate")'))
    args = ("--sme2-metric=instructions", "-o", "sme2_instruction_inferences=3")
    sme2_project.runpytest_inprocess(*args, *UPDATE).assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    counted = json.loads(path.read_text())["profiles"]
    [record] = counted.values()
    assert record["instructions"]["per_inference"] > 1e6 and record["instructions"]["inferences"] == 3
    sme2_project.runpytest_inprocess(*args).assert_outcomes(passed=1)
    # a real extra operator: a third 3x3 convolution
    model.write_text(GATE_MODEL.replace("# EXTRA", "torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU(),"))
    result = sme2_project.runpytest_inprocess(*args)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "instruction regression" in out and "tolerance +0.50%" in out
    assert "--sme2-update-baselines --sme2-metric=instructions" in out


def test_profile_concat_matches_operators_by_identity(tmp_path: Path) -> None:
    from pytest_sme2.evidence.etdump import read_run
    from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump
    from pytest_sme2.profile.profile import Profile

    def trace(name: str, durations: list[int], with_extra_op: bool):
        blocks = []
        for r, ms in enumerate(durations):
            t0 = r * 10_000_000
            events = [SyntheticEvent(t0, t0 + ms * 500_000, delegate_name="Convolution (NHWC, F32) IGEMM #1")]
            if with_extra_op:
                events.append(SyntheticEvent(t0 + ms * 500_000, t0 + ms * 600_000, delegate_name="Add (ND) #1"))
            events += [
                SyntheticEvent(t0, t0 + ms * 800_000, name="DELEGATE_CALL", instruction_id=0),
                SyntheticEvent(t0, t0 + ms * 1_000_000, name="Method::execute"),
            ]
            blocks.append(("Execute", events))
        return read_run(write_synthetic_etdump(tmp_path / f"{name}.etdp", blocks))

    first = Profile(trace("a", [1, 2], False), model="m", recipe="r", variant="v", wall_ms=np.array([1.0, 2.0]))
    second = Profile(trace("b", [3], True), model="m", recipe="r", variant="v", wall_ms=np.array([3.0]))
    merged = Profile.concat([first, second])
    assert merged.e2e_ms.tolist() == [1.0, 2.0, 3.0] and merged.wall_ms.tolist() == [1.0, 2.0, 3.0]
    assert merged.metadata["chunks"] == 2
    ops = merged.ops.set_index("event")
    assert ops.loc["Convolution (NHWC, F32) IGEMM #1", "runs_ms"].tolist() == [0.5, 1.0, 1.5]
    assert ops.loc["Add (ND) #1", "runs_ms"].tolist() == [0.0, 0.0, 0.3]  # absent in the first chunk: 0 ms
    assert merged.delegation_coverage == pytest.approx(0.8)  # every run's coverage
    with pytest.raises(ValueError, match="different program or variant"):
        Profile.concat([first, Profile(first.trace, model="m", recipe="r", variant="other")])


def test_quality_check_refuses_a_baseline_too_few_undisturbed_runs_stand_on(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=_test_file())
    # 3 processes of 3 runs: fewer than 10 undisturbed runs, whatever the machine does
    refused = sme2_project.runpytest_inprocess("--sme2-update-baselines", "--sme2-runs=3")
    refused.assert_outcomes(failed=1)
    out = refused.stdout.str()
    assert "baseline not written to" in out and "runs were undisturbed (need 10)" in out
    assert "--sme2-accept-noisy-baselines" in out and "--sme2-runs" in out
    assert "judged on this session's replicas only" in out and "'Between sessions'" in out  # what it cannot see
    assert _baseline_files(sme2_project) == [] and "1 refused" in out

    written = sme2_project.runpytest_inprocess(*UPDATE, "--sme2-runs=3")
    written.assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    [record] = json.loads(path.read_text())["profiles"].values()
    assert record["quality"]["runs"] == 9 and any("(need 10)" in p for p in record["quality"]["accepted_despite"])
    assert record["replica_sizes"] == [3, 3, 3]
    assert (
        set(record["per_run"]["shares"]) == set(record["shares"]) and len(record["per_run"]["delegation_coverage"]) == 9
    )


def test_quality_check_writes_a_good_baseline_and_records_its_quality(sme2_project: pytest.Pytester) -> None:
    model = sme2_project.path / "models" / "gate.py"
    model.write_text(GATE_MODEL)  # about a millisecond: steady enough to record from 40 runs
    # the default tolerances: the quality check refuses what they could not use (the others' latency=5.0 would
    # let a 100%-wide interval through, and this test once read 11.7% on a busy CI machine)
    test = _test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("gate")')
    sme2_project.makepyfile(test_gate=test.replace("@pytest.mark.baseline(latency=5.0, shares=0.5)\n", ""))
    result = sme2_project.runpytest_inprocess("--sme2-update-baselines", "--sme2-runs=40", "-o", "sme2_max_rounds=3")
    out = result.stdout.str()
    if "baseline not written" in out:  # the machine was too busy: the refusal must then say why
        assert "disturbed" in out or "moves by" in out
        pytest.skip(
            "this machine was too busy to record a good baseline: " + out[out.index("baseline not written") :][:300]
        )
    result.assert_outcomes(passed=1)
    [path] = _baseline_files(sme2_project)
    [record] = json.loads(path.read_text())["profiles"].values()
    quality = record["quality"]
    assert quality["basis"] == "relative" and quality["runs"] >= 40 and "accepted_despite" not in quality
    # measured in 3 fresh host workers (sme2_baseline_replicas = 3), each with its own pid in its log name
    assert quality["replicas"] == 3 and len(record["replica_sizes"]) == 3 and min(record["replica_sizes"]) >= 40
    assert quality["detectable_change"]["latency"] <= 0.15


def test_a_written_baseline_says_which_variants_time_cannot_gate(sme2_project: pytest.Pytester) -> None:
    """A CI owner's trial: a baseline of a very short run was "written" with no word that a change of its latency
    tolerance passes under min_effect_ms. A real update (min_effect_ms set above the run, as a 0.04 ms model's is by
    default) names the variant in the terminal summary; with the default floor this 30 us model at a 500% tolerance
    says nothing."""
    gated = _test_file().replace(
        "@pytest.mark.baseline(latency=5.0, shares=0.5)",
        "@pytest.mark.baseline(latency=0.1, shares=0.5, min_effect_ms=100)",
    )
    sme2_project.makepyfile(test_gate=gated)
    result = sme2_project.runpytest_inprocess(*UPDATE)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*written: *latency and shares are gated only above 100 ms of change "
            "(min_effect_ms): tiny fp32-xnnpack [[]host *]: * ms, so changes under *% pass; "
            "instructions (--sme2-metric=instructions or the emulated target) gate it exactly*"
        ]
    )
    sme2_project.makepyfile(test_gate=_test_file())
    plain = sme2_project.runpytest_inprocess(*UPDATE)
    plain.assert_outcomes(passed=1)
    assert "written: " not in plain.stdout.str()


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="needs valgrind: `make system-deps` or apt-get install valgrind"
)
def test_a_failing_assertion_still_gates_and_an_update_writes_no_baseline_of_it(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 65: a failing assertion in the test body (the user's own threshold) silenced the gate: no verdict,
    nothing about a regression of the same change, and an update wrote nothing without saying so. The body's
    failure stays the test's failure; the gate's verdicts show beside it; the update lists what it did not write."""
    model = sme2_project.path / "models" / "gate.py"
    model.write_text(GATE_MODEL)
    body = _test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("gate")')
    body += '    import os\n    assert os.environ.get("SME2_BODY") != "fail", "the threshold of the test itself"\n'
    sme2_project.makepyfile(test_gate=body)
    args = ("--sme2-metric=instructions", "-o", "sme2_instruction_inferences=3")

    monkeypatch.setenv("SME2_BODY", "fail")
    update = sme2_project.runpytest_inprocess(*args, *UPDATE)
    update.assert_outcomes(failed=1)
    assert _baseline_files(sme2_project) == []  # a failing test's profiles are not a baseline
    update.stdout.fnmatch_lines(
        [
            "*1 baseline file(s) (*): 0 written, 0 refused, 1 not written (their tests failed), 0 ok, *",
            "*not written: *test_gate.py_test_tiny~*.json: the test failed (AssertionError: the threshold of the test"
            " itself*); fix it, then update again",
        ]
    )

    monkeypatch.setenv("SME2_BODY", "pass")
    sme2_project.runpytest_inprocess(*args, *UPDATE).assert_outcomes(passed=1)
    assert len(_baseline_files(sme2_project)) == 1

    # the same change fails the threshold and the baseline: both are said, the body's failure first
    model.write_text(GATE_MODEL.replace("# EXTRA", "torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU(),"))
    monkeypatch.setenv("SME2_BODY", "fail")
    result = sme2_project.runpytest_inprocess(*args)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "AssertionError: the threshold of the test itself" in out
    section = out[out.index("sme2 baselines") :]
    assert "instruction regression" in section and "tolerance +0.50%" in section, section[:3000]
    assert re.search(r"1 baseline file\(s\) \(.*\): 0 written, 0 refused, 0 ok, \d+ regression\(s\) in 1 test", out)
