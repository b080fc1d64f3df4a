"""pytest-sme2 bisect (issue 15): a real git repository, a real model, real runs; names the commit that added
an operator the perf test does not allow."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers_versions import needs_binding_etdump

from conftest import quick_host_ini
from pytest_sme2.cli import main
from pytest_sme2.cli.bisect import REASON_CHARS, reason
from pytest_sme2.errors import UsageError

MODEL = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y{extra}

def get_eager_model():
    torch.manual_seed(0)
    return Net().eval()

def get_example_inputs():
    return (torch.ones(1, 3, 16, 16),)
"""
PERF_TEST = """
import pytest
from pytest_sme2 import assert_portable_ops

@pytest.mark.model("net")
def test_net(exported_pte, runner, etdump_profile):
    assert_portable_ops(etdump_profile(exported_pte, runner()), allowed=set())
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, shared_export_cache: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git: apt-get install git")
    root = tmp_path / "models-repo"
    (root / "models").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / "pytest.ini").write_text(quick_host_ini(shared_export_cache))
    (root / ".gitignore").write_text(".sme2/\n.pytest_cache/\n__pycache__/\n")
    (root / "test_perf.py").write_text(PERF_TEST)
    history = [
        "net: conv + relu",
        "docs: readme",
        "docs: usage",
        "net: cumulative sum of the output",
        "docs: more readme",
        "docs: changelog",
    ]
    for subject in history:
        if subject.startswith("docs"):
            (root / "README.md").write_text(subject + "\n")
        else:  # a real extra operator: cumsum has no XNNPACK kernel, so it runs as a portable one
            extra = ".cumsum(dim=1)" if "cumulative" in subject else ""
            (root / "models" / "net.py").write_text(MODEL.format(extra=extra))
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", subject)
    return root


def test_a_failing_good_end_stops_before_bisecting(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.cli import bisect

    commits = _git(repo, "log", "--format=%H", "--reverse").splitlines()
    good, bad = commits[3], commits[5]  # GOOD already has cumsum: every commit would be bad
    monkeypatch.chdir(repo)
    out = repo.parent / "bisect-out"
    expected = (
        rf"GOOD {good} \({good[:12]} net: cumulative sum of the output\) is not good: bad: "
        r"FAILED test_perf.py::test_net - .*Nothing was bisected"
    )
    with pytest.raises(UsageError, match=expected) as caught:
        bisect.run(good, bad, ["test_perf.py", "-p", "no:cacheprovider"], out)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [(s["role"], s["verdict"]) for s in steps] == [("good end", "bad")]  # BAD is not even tested
    assert steps[0]["artifacts"] in str(caught.value) and Path(steps[0]["artifacts"], "pytest.log").is_file()
    assert _git(repo, "rev-parse", "HEAD") == bad and _git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert not (repo / ".git" / "BISECT_LOG").exists()


def test_a_passing_bad_end_stops_before_bisecting(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two quick sessions of a plain test, no model: BAD passes too, so there is nothing to find."""
    from pytest_sme2.cli import bisect

    (repo / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    _git(repo, "add", "test_plain.py")
    _git(repo, "commit", "-q", "-m", "a plain test")
    (repo / "README.md").write_text("still passing\n")
    _git(repo, "commit", "-q", "-am", "docs: still passing")
    monkeypatch.chdir(repo)
    out = repo / "bisect-output" / "run-1"  # in the repository, a folder its .gitignore does not name
    with pytest.raises(UsageError, match=r"BAD HEAD \(\w{12} docs: still passing\) is not bad: good\. Nothing"):
        bisect.run("HEAD~1", "HEAD", ["test_plain.py", "-p", "no:cacheprovider"], out)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [(s["role"], s["verdict"]) for s in steps] == [("good end", "good"), ("bad end", "good")]
    assert _git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""  # the output ignores itself


@needs_binding_etdump
def test_a_missing_baseline_is_no_failure_unless_the_user_says_so(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's own -o comes before the user's arguments, and pytest keeps the last -o of a name: the user's
    `-o sme2_baseline_missing=fail` fails GOOD (no baseline anywhere), and the reason names the missing baseline."""
    from pytest_sme2.cli import bisect

    commits = _git(repo, "log", "--format=%H", "--reverse").splitlines()
    monkeypatch.chdir(repo)
    with pytest.raises(
        UsageError, match=r"is not good: bad: FAILED test_perf.py::test_net - " r"no baseline for net fp32-xnnpack"
    ):
        bisect.run(
            commits[0],
            commits[-1],
            ["test_perf.py", "-p", "no:cacheprovider", "-o", "sme2_baseline_missing=fail"],
            repo.parent / "bisect-out",
        )


def test_bisect_refuses_a_dirty_tree_and_unknown_commits(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.cli import bisect

    monkeypatch.chdir(repo)
    with pytest.raises(UsageError, match="'nosuch' is not a commit"):
        bisect.run("nosuch", "HEAD", ["test_perf.py"], repo.parent / "o")
    (repo / "test_perf.py").write_text(PERF_TEST + "\n# edited\n")
    with pytest.raises(UsageError, match="uncommitted changes; commit or stash them"):
        bisect.run("HEAD~1", "HEAD", ["test_perf.py"], repo.parent / "o")


PACKAGE_BLOCKS = """
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)){extra}
"""
PACKAGE_MODEL = """
import torch
from .blocks import Block

def get_eager_model():
    torch.manual_seed(0)
    return Block().eval()

def get_example_inputs():
    return (torch.ones(1, 3, 16, 16),)
"""


@pytest.fixture
def package_repo(tmp_path: Path, shared_export_cache: Path) -> Path:
    """A model split over a package (mynet/model.py imports mynet/blocks.py), registered by module name with
    pytest's pythonpath; one commit changes only blocks.py."""
    if shutil.which("git") is None:
        pytest.skip("needs git: apt-get install git")
    root = tmp_path / "package-repo"
    (root / "mynet").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "models" / ".keep").write_text("")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / "pytest.ini").write_text(
        quick_host_ini(shared_export_cache, "pythonpath = .", "sme2_models = net = mynet.model")
    )
    (root / ".gitignore").write_text(".sme2/\n.pytest_cache/\n__pycache__/\n")
    (root / "test_perf.py").write_text(PERF_TEST)
    (root / "mynet" / "__init__.py").write_text("")
    (root / "mynet" / "model.py").write_text(PACKAGE_MODEL)
    for subject in ["mynet: conv + relu", "docs: readme", "blocks: cumulative sum of the output", "docs: changelog"]:
        if subject.startswith("docs"):
            (root / "README.md").write_text(subject + "\n")
        else:
            extra = ".cumsum(dim=1)" if "cumulative" in subject else ""
            (root / "mynet" / "blocks.py").write_text(PACKAGE_BLOCKS.format(extra=extra))
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", subject)
    return root


@needs_binding_etdump
def test_bisect_names_a_commit_that_changes_only_an_imported_module(
    package_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The export cache keys the traced program, not the file defining get_eager_model: the commit that
    touches only mynet/blocks.py is re-exported, and named. The ini keeps the default policy (a missing baseline
    fails the test) and no commit has a baseline: bisect must still name the commit that added cumsum, not the
    one after GOOD (docs: readme), and say why it is bad. (One bisection checks all of this: it once ran three
    times, with and without baselines and over a single-file model, 50-70 s each.)"""
    commits = _git(package_repo, "log", "--format=%H %s", "--reverse").splitlines()
    good, bad = commits[0].split()[0], commits[-1].split()[0]
    culprit = next(line.split()[0] for line in commits if "cumulative sum" in line)
    assert _git(package_repo, "show", "--format=", "--name-only", culprit) == "mynet/blocks.py"
    monkeypatch.chdir(package_repo)
    out = package_repo.parent / "bisect-out"
    assert main(["bisect", good, bad, "--out", str(out), "--", "test_perf.py", "-p", "no:cacheprovider"]) == 0
    printed = capsys.readouterr().out
    assert f"first bad commit: {culprit[:12]} blocks: cumulative sum of the output" in printed  # not docs: readme
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert {s["verdict"] for s in steps} <= {"good", "bad"} and steps
    assert all(Path(s["artifacts"], "pytest.log").is_file() for s in steps)  # each step's session kept
    assert any(s["commit"] == culprit and s["verdict"] == "bad" for s in steps)
    assert [(s["role"], s["commit"], s["verdict"]) for s in steps[:2]] == [
        ("good end", good, "good"),
        ("bad end", bad, "bad"),
    ]  # checked first
    by_commit = {s["commit"]: s for s in steps}
    assert by_commit[good]["reason"] == ""
    why = by_commit[culprit]["reason"]  # the gate's own message (not a missing baseline), up to REASON_CHARS
    assert why.startswith("FAILED test_perf.py::test_net - AssertionError: ") and "portable kernels" in why
    assert len(why) <= REASON_CHARS
    assert f"first bad commit: {culprit[:12]} blocks: cumulative sum of the output: {why} (" in printed
    step_lines = (out / "bisect.log").read_text()  # what each step printed, as git bisect run shows it
    assert f"{culprit[:12]} blocks: cumulative sum of the output: bad: {why}\n" in step_lines
    assert _git(package_repo, "rev-parse", "HEAD") == bad  # the checkout is restored
    assert not (package_repo / ".git" / "BISECT_LOG").exists()


SLOW_TEST = """
import os, pathlib, time

def test_slow():
    pathlib.Path({marker!r}).write_text(str(os.getpid()))
    time.sleep(300)
"""


def test_sigterm_mid_bisect_restores_the_branch_and_ends_the_step(tmp_path: Path) -> None:
    """Issue 23 (weak): SIGTERM to `pytest-sme2 bisect` left the repository detached or mid-bisect. Here GOOD
    passes, BAD fails and the commits between sleep, so the signal arrives while `git bisect run` runs a step."""
    import os
    import signal
    import sys
    import time

    if shutil.which("git") is None:
        pytest.skip("needs git: apt-get install git")
    root, marker = tmp_path / "repo", tmp_path / "step.pid"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / ".gitignore").write_text(".sme2/\n.pytest_cache/\n__pycache__/\n")
    bodies = (
        ["def test_fast():\n    pass\n"]
        + [SLOW_TEST.format(marker=str(marker))] * 3
        + ["def test_fast():\n    assert False\n"]
    )
    for i, body in enumerate(bodies):
        (root / "test_x.py").write_text(body + f"# {i}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"commit {i}")
    head = _git(root, "rev-parse", "HEAD")
    good = _git(root, "rev-list", "--max-parents=0", "HEAD")
    bisect = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_sme2.cli",
            "bisect",
            good,
            head,
            "--out",
            str(tmp_path / "out"),
            "--",
            "test_x.py",
            "-p",
            "no:cacheprovider",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not marker.exists() and bisect.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), bisect.communicate(timeout=60)
    assert (root / ".git" / "BISECT_START").exists()  # really mid-bisect
    step_pid = int(marker.read_text())
    bisect.send_signal(signal.SIGTERM)
    out, err = bisect.communicate(timeout=120)
    assert bisect.returncode == -signal.SIGTERM, (out, err)
    assert _git(root, "symbolic-ref", "--short", "HEAD") == "main" and _git(root, "rev-parse", "HEAD") == head
    assert not (root / ".git" / "BISECT_START").exists() and not (root / ".git" / "BISECT_LOG").exists()
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == ""
    for _ in range(50):  # the step's pytest was ended with its process group, not left sleeping
        try:
            os.kill(step_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the step's pytest {step_pid} still runs")


def test_a_gate_failure_reason_drops_the_heading_and_keeps_what_failed() -> None:
    """A user's trial: "FAILED <id> - Failed: sme2 baseline check failed: mynet fp32-xnnpack [...]: i..." said only
    which test; the heading took the room of the cause."""
    output = "\n".join(
        [
            "FAILED perf_tests/test_mynet.py::test_mynet_delegated_and_conv_bound - "
            "Failed: sme2 baseline check failed:",
            "sme2 baseline check failed:",
            "mynet fp32-xnnpack [emulated sme2=auto threads=1]: the program's operators changed (new: Convolution "
            "(NHWC, PF32) IGEMM #3 @0 (b1.pw: aten.convolution.default))",
        ]
    )
    why = reason(output, "bad", "1 failed")
    assert why.startswith("FAILED perf_tests/test_mynet.py::test_mynet_delegated_and_conv_bound - mynet fp32-xnnpack")
    assert "baseline check failed" not in why and "operators changed" in why and len(why) <= REASON_CHARS
