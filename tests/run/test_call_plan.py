"""Call plans: what one runner process calls, and how the native runner is told."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_gate import write_model_project

from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.run.call_plan import CallPlan, load_plan, native_calls
from pytest_sme2.run.native.build import build_problem
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


def test_nested_example_inputs_are_the_programs_flat_inputs_in_order() -> None:
    x, h, c = torch.full((2, 3), 1.0), torch.full((1, 2, 4), 2.0), torch.full((1, 2, 4), 3.0)
    plan = CallPlan(calls=((x, (h, c)),), warmup_calls=([x, [h, c]],))
    assert [t[0, 0, 0].item() if t.dim() == 3 else t[0, 0].item() for t in plan.calls[0]] == [1.0, 2.0, 3.0]
    assert len(plan.warmup[0]) == 3


NESTED_MODEL = '''
"""An LSTM whose example inputs nest as ExecuTorch's own lstm example's do: (x, (h0, c0))."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, num_layers=1)

    def forward(self, x, state):
        out, (h, c) = self.lstm(x, state)
        return out, h, c


def get_eager_model():
    torch.manual_seed(0)
    return Net().eval()


def get_example_inputs():
    return (torch.randn(4, 2, 8), (torch.zeros(1, 2, 16), torch.zeros(1, 2, 16)))
'''
NESTED_TEST = """
import pytest
from pytest_sme2 import assert_outputs_match


@pytest.mark.model("nested")
def test_nested(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    assert_outputs_match(profile, exported_pte)
"""


@pytest.mark.skipif(build_problem() is not None, reason=f"the native runner cannot be built here: {build_problem()}")
def test_a_model_with_nested_example_inputs_runs_on_the_native_runner(
    pytester: pytest.Pytester, shared_export_cache: Path
) -> None:
    """ExecuTorch's lstm example, (x, (h0, c0)), through the real native runner: its outputs are the eager model's
    (helper-5's onboarding of the wheel's examples: the run died with "'tuple' object has no attribute 'detach'")."""
    write_model_project(pytester, "nested", NESTED_MODEL, NESTED_TEST, "local", shared_export_cache)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-runs=2")
    result.assert_outcomes(passed=1)
