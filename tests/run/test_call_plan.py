"""Call plans: what one runner process calls, and how the native runner is told."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.call_plan import CallPlan, load_plan, native_calls
from pytest_sme2.run.native.tensorfile import read_tensors
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.run.targets.native_runner import RunnerFiles, runner_arguments


def _call(n: int, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(n, dtype=torch.long).reshape(1, n), torch.tensor([pos])


def test_an_export_inputs_file_reads_as_one_call_of_forward(tmp_path: Path) -> None:
    path = tmp_path / "inputs.pt"
    torch.save((torch.ones(1, 3),), path)
    plan = load_plan(path)
    assert plan.is_single_call and plan.method == "forward" and plan.calls[0][0].shape == (1, 3)


def test_a_saved_plan_comes_back_whole(tmp_path: Path) -> None:
    plan = CallPlan(
        calls=(_call(1, 8), _call(1, 9)), method="decode", warmup_calls=(_call(8, 0),), warmup_method="prefill"
    )
    back = load_plan(plan.save(tmp_path / "calls.pt"))
    assert (back.method, back.warmup_method_name, len(back.calls), len(back.warmup)) == ("decode", "prefill", 2, 1)
    assert int(back.calls[1][1]) == 9 and back.warmup[0][0].shape == (1, 8)
    assert not back.is_single_call


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(calls=()), "calls is empty"),
        (dict(calls=(_call(1, 0), (torch.ones(1),))), "different numbers of inputs"),
        (dict(calls=(_call(1, 0),), method="not a name"), "is not a method name"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_naming_why(bad: dict, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        CallPlan(**bad)


def test_a_file_that_is_neither_is_named(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"something": 1}, path)
    with pytest.raises(RunnerError, match="neither an inputs file"):
        load_plan(path)


def test_the_native_runner_gets_each_call_and_the_warmup_calls_apart(tmp_path: Path) -> None:
    plan = CallPlan(calls=(_call(1, 8), _call(1, 9)), warmup_calls=(_call(8, 0),))
    calls = native_calls(plan.save(tmp_path / "calls.pt"), tmp_path / "inputs.bin")
    timed = read_tensors(calls.inputs)
    assert [a.shape for a in timed] == [(1, 1), (1,), (1, 1), (1,)] and int(timed[3][0]) == 9
    assert [a.shape for a in read_tensors(calls.warmup_inputs)] == [(1, 8), (1,)]
    assert calls.flags == ("--inputs_per_call=2", "--method=forward", "--warmup_method=forward")
    argv = runner_arguments(
        "runner",
        RunnerFiles("p.pte", "t", "w", "o", inputs="in.bin", warmup_inputs="wi.bin", call_flags=calls.flags),
        RunSpec(runs=2),
    )
    assert "--warmup_inputs_path=wi.bin" in argv and "--inputs_per_call=2" in argv


def test_a_single_call_needs_no_flag_any_runner_would_not_know(tmp_path: Path) -> None:
    path = tmp_path / "inputs.pt"
    torch.save((torch.ones(2),), path)
    calls = native_calls(path, tmp_path / "inputs.bin")
    assert calls.flags == () and calls.warmup_inputs is None
