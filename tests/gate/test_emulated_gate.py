"""The emulated target's gate, end to end: record a baseline of a real program under qemu, change the
model the way a model author would, and the gate names what changed. Counts are exact, so an unchanged
model passes every time and each change fails every time."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_gate import write_model_project

from pytest_sme2.run import emulation_setup as emulation

STATUS = emulation.status()
pytestmark = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")

# conv (packed PF32 with SME2) -> ReLU -> conv -> flatten -> linear (packed). ``{change}`` edits it.
MODEL = '''
"""A small CNN for the emulated gate's tests."""
import torch

CHANNELS = {channels}
SIZE = {size}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Conv2d(8, CHANNELS, 3, padding=1, groups={groups})
        self.second = torch.nn.Conv2d(CHANNELS, 16, 3, padding=1)
        self.head = torch.nn.Linear(16 * SIZE * SIZE, 10)

    def forward(self, x):
        y = torch.relu(self.first(x))
        y = {middle}
        y = self.second(y)
        y = self.head(torch.flatten(y, 1))
        return {output}


def get_eager_model():
    torch.manual_seed(0)
    return Net().eval()


def get_example_inputs():
    return (torch.ones(1, 8, SIZE, SIZE),)
'''
BASE = {"channels": 32, "size": 16, "groups": 1, "output": "y", "middle": "y"}
TEST = """
import pytest
from pytest_sme2 import assert_outputs_match


@pytest.mark.model("gated")
def test_gated(exported_pte, runner, etdump_profile):
    on = etdump_profile(exported_pte, runner(sme2=True))
    assert_outputs_match(on, exported_pte)
"""


def _project(pytester: pytest.Pytester, shared_export_cache, **change: object) -> None:  # noqa: ANN001
    write_model_project(pytester, "gated", MODEL.format(**{**BASE, **change}), TEST, "emulated", shared_export_cache)


_RECORDED: dict[str, Path] = {}  # this process's copy of the unchanged model's recorded baselines


@pytest.fixture
def recorded(
    pytester: pytest.Pytester,
    shared_export_cache,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> pytest.Pytester:
    """A project whose baseline of the unchanged model is recorded, and rerun unchanged: it passes.

    Recorded and rerun once per test process (the counts repeat exactly, so a record made for one test is the
    record every test would make); later tests get a copy of its baselines folder (issue 25).
    """
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # this file tests the gate: turn it back on
    _project(pytester, shared_export_cache)
    if "baselines" not in _RECORDED:
        pytester.runpytest_inprocess("--sme2-update-baselines").assert_outcomes(passed=1)
        rerun = pytester.runpytest_inprocess()
        rerun.assert_outcomes(passed=1)
        rerun.stdout.fnmatch_lines(
            ["*1 baseline file(s) (counted instructions, emulated target): 0 written*" "0 regression(s)*"]
        )
        kept = tmp_path_factory.mktemp("emulated-gate-baselines") / "baselines"
        shutil.copytree(pytester.path / "baselines", kept)
        _RECORDED["baselines"] = kept
    else:
        shutil.copytree(_RECORDED["baselines"], pytester.path / "baselines")
    return pytester


def _changed(pytester: pytest.Pytester, shared_export_cache, **change: object):  # noqa: ANN001, ANN202
    _project(pytester, shared_export_cache, **change)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    return result


def test_a_new_operator_outside_the_delegate_fails_naming_it(recorded, shared_export_cache) -> None:
    # the where node is new to the program (nothing fell out: no node of the baseline left the delegate)
    result = _changed(recorded, shared_export_cache, output="torch.where(y > 0, y, 0.5 * y)")
    result.stdout.fnmatch_lines(
        [
            "*[[]regression[]]*new node(s) run outside the delegate: *<root>: aten.where.self*"
            "(portable kernel(s) new to the program: *native_call_where.self_out*)*"
        ]
    )


def test_a_lost_sme_kernel_path_fails_naming_the_operator(recorded, shared_export_cache) -> None:
    # the first convolution made depthwise: XNNPACK has no SME kernel for it (DWConv instead of PF32 IGEMM)
    result = _changed(recorded, shared_export_cache, channels=8, groups=8)
    result.stdout.fnmatch_lines(
        [
            "*operator Convolution (NHWC, PF32) IGEMM #1 @0 (first: aten.convolution.default) "
            "(now Convolution (NHWC, F32) DWConv #1 @0) "
            "ran * SME instructions in the baseline and none now: its SME kernel path is lost*"
        ]
    )


def test_five_percent_more_instructions_in_one_operator_fails_naming_it(recorded, shared_export_cache) -> None:
    # 34 instead of 32 channels out of the first convolution: that operator and the next do 6% more work
    result = _changed(recorded, shared_export_cache, channels=34)
    result.stdout.fnmatch_lines(
        [
            "*operator Convolution (NHWC, PF32) IGEMM #1 @0 (first: aten.convolution.default): "
            "* instructions vs baseline *"
        ]
    )


def test_ten_percent_more_planned_memory_fails(recorded, shared_export_cache) -> None:
    result = _changed(recorded, shared_export_cache, size=17)  # 17x17 maps instead of 16x16: +13% activations
    result.stdout.fnmatch_lines(["*planned memory * bytes vs baseline * (+1?.??%); tolerance +0.0%*"])


def _message(result) -> list[str]:  # noqa: ANN001
    """The failing test's message: the lines after its header, up to pytest's next section."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.endswith("sme2 baseline check failed:"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("---") or lines[i].startswith("==="))
    return lines[start + 1 : end]


def test_an_operator_inserted_mid_model_is_the_headline_and_splits_no_pairing(recorded, shared_export_cache) -> None:
    # a cumsum between the convolutions falls out of XNNPACK: the delegate splits in two, transposes are
    # added at the new boundary, and every later operator is renumbered and moves in execution order
    result = _changed(recorded, shared_export_cache, middle="torch.cumsum(y, dim=1)")
    message = _message(result)
    assert "new node(s) run outside the delegate: <root>: aten.cumsum.default" in message[0], message
    assert not any("SME kernel path is lost" in line for line in result.stdout.lines)
    assert not any("instructions vs baseline" in line for line in result.stdout.lines)  # no operator mispaired
    assert len(message) <= 8, message
    assert sum(line.startswith("baseline: ") for line in message) == 1
    assert sum("update the baseline" in line for line in message) == 1
    [listed] = [line for line in message if line.startswith("every verdict")]
    verdicts_file = listed.split(": ", 1)[1]
    text = open(verdicts_file, encoding="utf-8").read()
    assert "[delegate]" in text.splitlines()[1] and "share of CONV in instructions" in text


def test_a_permute_and_contiguous_pair_is_headlined_by_the_new_operators(recorded, shared_export_cache) -> None:
    result = _changed(recorded, shared_export_cache, middle="y.permute(0, 1, 3, 2).contiguous()")
    message = _message(result)
    # the change names the new nodes, by what they are in the graph
    assert "new node(s): <root>: aten.permute_copy.default" in message[0], message
    assert not any("SME kernel path is lost" in line for line in result.stdout.lines)
    assert len(message) <= 8, message


def _modelled_records(baselines: Path) -> dict[str, dict]:
    """Each stored profile's ``modelled`` part, by label, from the baseline files under ``baselines``."""
    out = {}
    for path in baselines.rglob("*.json"):
        for label, record in json.loads(path.read_text())["profiles"].items():
            out[label] = record
    return out


def test_modelled_device_time_is_gated_naming_the_operator_and_its_ms_before_and_after(
    pytester: pytest.Pytester, shared_export_cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26, item 5: with --sme2-device the baseline keeps each counted run's modelled time on the device;
    unchanged, it passes; a wider first convolution fails on modelled time, naming the operator with the ms of
    the baseline and the ms the changed model's own baseline records."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    device = ("-o", "sme2_device=apple-m4")
    _project(pytester, shared_export_cache)
    pytester.runpytest_inprocess("--sme2-update-baselines", *device).assert_outcomes(passed=1)
    [(label, before)] = _modelled_records(pytester.path / "baselines").items()
    kept = before["modelled"]
    assert kept["device"] == "apple-m4" and kept["e2e_ms"] > 0
    assert set(kept["ops"]) == set(before["instructions"]["ops"])  # one modelled time per counted operator
    assert kept["e2e_ms"] >= sum(kept["ops"].values())
    pytester.runpytest_inprocess(*device).assert_outcomes(passed=1)

    _project(pytester, shared_export_cache, channels=48)  # the first convolution 32 -> 48 output channels
    failed = pytester.runpytest_inprocess(*device, "--sme2-artifacts-dir=art")
    failed.assert_outcomes(failed=1)
    # `pytest-sme2 check` judges the kept records again, without pytest: the same modelled verdict
    [session] = [p for p in (pytester.path / "art").iterdir() if p.is_dir()]
    judged = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "check", str(session)],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert judged.returncode == 1, judged.stdout + judged.stderr
    [again] = [line for line in judged.stdout.splitlines() if "modelled time on apple-m4" in line]
    pytester.runpytest_inprocess("--sme2-update-baselines", "--sme2-baselines-dir=changed", *device)
    after = _modelled_records(pytester.path / "changed")[label]["modelled"]
    change = after["e2e_ms"] / kept["e2e_ms"] - 1
    assert change > 0.02
    # With CI set (as on CI runners) pytest repeats the whole failure message in its short summary: one distinct line
    [line] = {line for line in failed.stdout.lines if "modelled time on apple-m4" in line}
    shown = re.search(r"modelled time on apple-m4 (\S+), most (.+?) ([0-9.e+-]+ [mun]s) -> ([0-9.e+-]+ [mun]s)", line)
    assert shown, line
    op = shown.group(2)
    assert op in kept["ops"] and op in after["ops"]
    from pytest_sme2.profile.device_model import time_text

    assert shown.group(1, 3, 4) == (f"{change:+.1%}", time_text(kept["ops"][op]), time_text(after["ops"][op]))
    assert again.strip() == line.strip()
    grown = {name: after["ops"][name] - kept["ops"][name] for name in kept["ops"] if name in after["ops"]}
    assert op == max(grown, key=grown.get)  # the operator that grew most is the one named

    # A model author's trial: the update command the failure printed had no --sme2-device, and running it dropped
    # every modelled block without a word; a session without the device skipped the modelled check unseen.
    assert "--sme2-update-baselines --sme2-device=apple-m4" in failed.stdout.str()
    plain = pytester.runpytest_inprocess()
    assert (
        "1 modelled device time check(s) not judged: the baselines hold modelled time and this session models "
        "no device; add --sme2-device apple-m4 to judge them" in plain.stdout.str()
    )
    # its failure's update command names the device the baseline was modelled on (run as printed, it keeps it)
    assert "--sme2-update-baselines --sme2-device=apple-m4" in plain.stdout.str()
    dropped = pytester.runpytest_inprocess("--sme2-update-baselines")
    assert (
        "its modelled device time was not kept on apple-m4: this update modelled no device; record it again "
        "with --sme2-device apple-m4 to keep it" in dropped.stdout.str()
    )
    assert "modelled" not in _modelled_records(pytester.path / "baselines")[label]
    # a baseline priced by another pricing method (a review: its skip was only in the verdicts file)
    pytester.runpytest_inprocess("--sme2-update-baselines", *device).assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").rglob("*.json")
    stored = json.loads(path.read_text())
    stored["profiles"][label]["modelled"]["pricing_digest"] = "0" * 64
    path.write_text(json.dumps(stored))
    other = pytester.runpytest_inprocess(*device)
    other.assert_outcomes(passed=1)
    other.stdout.fnmatch_lines(
        [
            "  1 modelled device time check(s) not judged:",
            "    *priced by another version of apple-m4's numbers or pricing method*record the "
            "baseline again with --sme2-update-baselines --sme2-device apple-m4",
        ]
    )


def test_a_bigger_weight_fails_on_init_naming_it(recorded, shared_export_cache) -> None:
    """Issue 28 item 2: XNNPACK packs weights in Method::init. A head over 48x48 maps instead of 16x16 has a
    weight 9 times as big; the counted instructions of init grow with it (24x24, 2.25 times the weight, grew
    them 13.5%: within the 40% tolerance), and the gate names init with its counts before and after (besides
    the inference and memory that grow too)."""
    result = _changed(recorded, shared_export_cache, size=48)
    [listed] = [line for line in _message(result) if line.startswith("every verdict")]
    text = open(listed.split(": ", 1)[1], encoding="utf-8").read()
    [init] = [line for line in text.splitlines() if "init (Method::init) regression:" in line]
    assert init.strip().startswith("[regression]"), init
    before, after = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) -> ([\d,]+) instructions", init)[0])
    assert after > 1.25 * before
    # and the message names it, with the growth of those counts
    assert f"init (Method::init) +{(after - before) / before:.1%}" in "\n".join(_message(result))


README_TEST = """
import pytest


@pytest.mark.sme2
@pytest.mark.model("gated")
def test_readme(exported_pte, runner, etdump_profile):
    on = etdump_profile(exported_pte, runner(sme2=True))
    off = etdump_profile(exported_pte, runner(sme2=False))
    assert on.speedup_over(off).low >= 2.0  # emulated time is no time: skips here
    raise AssertionError("the lines after a timing skip must not run")
"""


def test_the_readme_example_skips_its_speedup_but_its_profiles_are_gated(
    pytester: pytest.Pytester, shared_export_cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example of docs/writing_tests.md, "A speedup in one test" (the README's first example until issue 67),
    asserts a speedup, which skips on the emulated target. Its two profiles were
    counted before that line: found by a user's trial, a layer added to the model then still exited 0, the test
    skipped and no baseline ever written. They are gated now: recorded, passed unchanged, failed when changed."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    write_model_project(pytester, "gated", MODEL.format(**BASE), README_TEST, "emulated", shared_export_cache)
    # no baseline yet, and the policy says skip: one skip with both reasons
    missing = pytester.runpytest_inprocess("-rs", "-o", "sme2_baseline_missing=skip")
    missing.assert_outcomes(skipped=1)
    missing.stdout.fnmatch_lines(["*speedup of gated * not checked; the lines after it did not run; *no baseline*"])
    update = pytester.runpytest_inprocess("--sme2-update-baselines", "-rs")
    update.assert_outcomes(skipped=1)
    update.stdout.fnmatch_lines(
        [
            "*1 baseline file(s) (counted instructions, emulated target): 1 written*",
            "*emulated timing is not hardware timing: speedup of gated * not checked; the lines "
            "after it did not run; the profiles built before it were written as baselines "
            "(1 file(s))*",
        ]
    )
    [written] = (pytester.path / "baselines").rglob("*.json")
    assert len(json.loads(written.read_text())["profiles"]) == 2  # SME2 on and off
    unchanged = pytester.runpytest_inprocess("-rs")
    unchanged.assert_outcomes(skipped=1)
    unchanged.stdout.fnmatch_lines(
        ["*0 written*0 regression(s)*", "*the profiles built before it passed their baselines (counted instructions)*"]
    )
    write_model_project(
        pytester,
        "gated",
        MODEL.format(**{**BASE, "output": "torch.where(y > 0, y, 0.5 * y)"}),
        README_TEST,
        "emulated",
        shared_export_cache,
    )
    changed = pytester.runpytest_inprocess()
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "*[[]regression[]]*new node(s) run outside the delegate: *<root>: aten.where.self*",
            "*0 written, 0 refused, * regression(s) in 1 test(s), *",
        ]
    )  # verdicts, tests
    # a user's trial: the failure came chained to the skip ("During handling of the above exception, ...")
    assert "During handling of the above exception" not in changed.stdout.str()


def test_the_instruction_metric_on_the_emulated_target_is_its_own_count(recorded) -> None:
    """A user's trial: --sme2-metric=instructions (docs/gate.md offers it beside the emulated target) counted the
    emulated run again under callgrind on the x86 host; unchanged failed ("no instruction counts of the emulated
    target; counting is off"), and its printed update replaced the emulated baselines by host counts."""
    [path] = (recorded.path / "baselines").rglob("*.json")
    before = path.read_text()
    judged = recorded.runpytest_inprocess("--sme2-metric=instructions")
    judged.assert_outcomes(passed=1)
    judged.stdout.fnmatch_lines(
        ["*1 baseline file(s) (counted instructions, emulated target): 0 written*" "0 regression(s)*"]
    )
    update = recorded.runpytest_inprocess(
        "--sme2-metric=instructions", "--sme2-update-baselines", "--sme2-artifacts-dir=updated"
    )
    update.assert_outcomes(passed=1)
    summary_md = next((recorded.path / "updated").rglob("summary.md")).read_text()
    assert "verdict: baseline unchanged" in summary_md  # not "no baseline check" (a review of this change)
    after = json.loads(path.read_text())
    [record] = after["profiles"].values()
    assert record["instructions"]["source"].startswith("qemu") and "callgrind" not in path.read_text()
    # and an update of unchanged code keeps the file as it was, its date and commit too (a user's trial: every
    # file rewritten, noise in the pull request's review)
    assert path.read_text() == before
    update.stdout.fnmatch_lines(
        [
            "*1 baseline file(s) (counted instructions, emulated target): 0 written, "
            "1 unchanged (kept as they were), 0 refused*"
        ]
    )
