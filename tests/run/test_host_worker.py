"""The host worker never hands one request's answer to another (issue 23, item 3).

The worker answers requests in order on one pipe. When the parent stopped waiting for an answer
for any reason but a clean reply (an exception in the wait, a callback that raised), the answer
used to stay in the pipe and the next test read it as its own: its profile held the previous
model. Now each request carries an id that its answer echoes, and any exception while a request
is outstanding stops the worker, so the next run starts a fresh one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_versions import needs_binding_etdump

from pytest_sme2.run.targets.host import _Worker

LINEAR_MODEL = '''
"""One Linear layer: no convolution anywhere in its profile."""
import torch

def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()

def get_example_inputs():
    return (torch.ones(4, 64),)
'''


@needs_binding_etdump
def test_an_exception_while_waiting_discards_the_worker_and_the_next_test_gets_its_own_answer(
    sme2_project: pytest.Pytester,
) -> None:
    (sme2_project.path / "models" / "linear.py").write_text(LINEAR_MODEL)
    sme2_project.makepyfile(
        """
        import select as real_select
        import types

        import pytest
        from pytest_sme2.run.targets import host

        @pytest.mark.perf(runs=7)
        @pytest.mark.model("tiny")
        def test_first(exported_pte, runner, etdump_profile, monkeypatch):
            calls = []

            def select_once(*args):
                calls.append(args)
                if len(calls) == 1:  # the wait for the answer, once the request is sent
                    raise OverflowError("timeout is too large")
                return real_select.select(*args)

            monkeypatch.setattr(host, "select", types.SimpleNamespace(select=select_once))
            etdump_profile(exported_pte, runner())

        @pytest.mark.perf(runs=3)
        @pytest.mark.model("linear")
        def test_second(exported_pte, runner, etdump_profile):
            profile = etdump_profile(exported_pte, runner())
            assert profile.runs == 3, f"{profile.runs} runs: the answer to another request"
            assert profile.share("CONV") == 0, "convolutions in a Linear model: the previous test's answer"
        """
    )
    result = sme2_project.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*RunnerError: host worker: run *tiny* failed while waiting for its answer "
            "(OverflowError: timeout is too large); the worker was stopped*"
        ]
    )


def _request(pte: Path, out_dir: Path, ident: object | None = None) -> dict:
    payload = {
        "pte": str(pte),
        "inputs": None,
        "threads": 1,
        "runs": 1,
        "warmup": 0,
        "etdump": False,
        "out_dir": str(out_dir),
        "warmup_name": "w.etdp",
        "timed_name": "t.etdp",
        "outputs_name": "o.pt",
        "reference": None,
    }
    return payload if ident is None else {**payload, "id": ident}


def test_an_answer_to_another_request_is_refused_and_the_worker_stopped(tmp_path: Path) -> None:
    worker = _Worker(tmp_path / "worker.log")
    try:
        missing = tmp_path / "missing.pte"
        # A request the parent no longer waits for (as after an interrupted wait): its answer comes first.
        assert worker.process.stdin is not None
        worker.process.stdin.write((__import__("json").dumps(_request(missing, tmp_path, "stale")) + "\n").encode())
        worker.process.stdin.flush()
        with pytest.raises(Exception, match="answered request 'stale' while request .* was outstanding"):
            worker.request(_request(missing, tmp_path), timeout_s=120)
        assert not worker.alive(), "a worker out of step with its requests must not serve another"
    finally:
        worker.kill()


def test_answers_echo_the_request_id(tmp_path: Path) -> None:
    worker = _Worker(tmp_path / "worker.log")
    try:
        first = worker.request(_request(tmp_path / "missing.pte", tmp_path), timeout_s=120)
        second = worker.request(_request(tmp_path / "missing.pte", tmp_path), timeout_s=120)
        assert first is not None and second is not None
        assert not first["ok"] and "missing.pte" in first["error"]
        assert first["id"] != second["id"]
        assert worker.alive()  # a failed run is a clean answer: the worker stays
    finally:
        worker.close()


def test_the_worker_loads_the_runtime_binding_without_the_exporter() -> None:
    """A fresh worker starts in about a second, not five: it imports the binding without executorch.exir's
    package body (the exporter); the runs themselves are checked against eager in tests/test_e2e_models.py."""
    import subprocess
    import sys

    probe = (
        "import sys; from pytest_sme2.run.targets.host_worker import runtime_binding; "
        "binding = runtime_binding(); "
        "print(hasattr(binding, '_load_for_executorch'), 'executorch.exir.capture' in sys.modules, "
        "'torch._dynamo' in sys.modules)"
    )
    printed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert printed == ["True", "False", "False"]


def test_a_fresh_worker_does_not_import_the_plugin_package() -> None:
    """Every measurement starts fresh workers, so their start is paid many times per session: the worker runs by
    its path and imports nothing of pytest_sme2 (``-m`` imported the package and its public API first, 0.47 s of
    1.7 s), and its own folder is not on its import path (a module there must not shadow another)."""
    import os
    import subprocess

    from pytest_sme2.run.targets.host import WORKER_SCRIPT, worker_command

    read_fd, write_fd = os.pipe()
    command = worker_command(write_fd)
    before_worker = "print(sorted(m for m in sys.modules if m.startswith('pytest_sme2')), sys.path[0]); runpy.run_path"
    probe = [*command[:2], command[2].replace("runpy.run_path", before_worker), *command[3:]]
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    with os.fdopen(read_fd, "rb") as reply:
        done = subprocess.run(
            probe,
            input='{"id": 1, "pte": "/nonexistent.pte", "threads": 1}\n',
            text=True,
            capture_output=True,
            pass_fds=(write_fd,),
            env=env,
            timeout=120,
        )
        os.close(write_fd)
        answer = reply.read().decode()
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"id": 1' in answer and '"ok": false' in answer  # it ran the request (and said what was wrong)
    imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "executorch.extension.pybindings.portable_lib" in imported
    assert not [name for name in imported if name.startswith("pytest_sme2")], imported
    assert done.stdout.splitlines()[0] == "[] "  # nothing of the package, and the script's folder not on sys.path
    assert WORKER_SCRIPT.parent.name == "targets" and str(WORKER_SCRIPT.parent) not in done.stdout


def test_sme2_on_without_sme2_on_the_host_target_names_the_emulated_target(tmp_path: Path) -> None:
    """A user's trial with --sme2-target=host on a CPU without SME2: the skip named hardware only, not the
    emulated target set up on that very machine."""
    from pytest_sme2.run.cpu import CpuInfo
    from pytest_sme2.run.targets.host import HostTarget

    target = HostTarget(tmp_path, cpu=CpuInfo("AMD EPYC", "x86_64", "Linux", frozenset()))
    reason = target.unsupported(True)
    assert reason is not None and "has no SME2" in reason and "--sme2-target=emulated" in reason
    mac = HostTarget(tmp_path, cpu=CpuInfo("Apple M2", "arm64", "Darwin", frozenset())).unsupported(True)
    assert "has no SME2" in mac and "emulated" not in mac  # qemu-user, the emulated target, is Linux only
    advised = HostTarget(tmp_path, cpu=CpuInfo("AMD EPYC", "x86_64", "Linux", frozenset()), sme2_advice="do X")
    assert advised.unsupported(True).endswith(", or do X")  # the auto target's own advice, when it has one
