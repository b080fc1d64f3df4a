"""assert_outputs_match on models whose outputs are not one tensor or a flat tuple (issue 23, item 9): the
eager reference is flattened as torch.export and ExecuTorch flatten outputs, leaves are named by their path,
and a model returning None is an export error saying what to return."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pytest
import torch

from pytest_sme2 import Recipe, assert_outputs_match
from pytest_sme2.errors import ExportError
from pytest_sme2.export.export import ExportedModel
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.profile.profile import Profile
from pytest_sme2.run.targets import RunSpec

MODEL = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return {returns}

def get_eager_model():
    return Net().eval()

def get_example_inputs():
    return (torch.ones(1, 3, 8, 8),)
"""
RETURNS = {
    "dict": '{"a": y, "b": 2 * y}',
    "nested": "(y, (2 * y, y + 1))",
    "none": "None",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sme2Session]:
    root = tmp_path_factory.mktemp("outputs")
    registry = ModelRegistry()
    for name, returns in RETURNS.items():
        (root / f"{name}.py").write_text(MODEL.format(returns=returns))
        registry.register(name, str(root / f"{name}.py"))
    session = Sme2Session(Settings(target="host", cache_dir=root / "cache", session_dir=root / "run"), registry)
    yield session
    session.close()


def _run(session: Sme2Session, name: str) -> tuple[ExportedModel, Profile]:
    exported = session.export(name, Recipe())
    return exported, Runner(session, RunSpec(runs=1, warmup=0), session.test_dir(name)).profile(exported)


def _tampered(exported: ExportedModel, tmp_path: Path, change) -> ExportedModel:  # noqa: ANN001
    """A copy of the export whose eager reference has ``change`` applied (so one leaf is wrong)."""
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(exported.directory, copy)
    reference = torch.load(exported.reference_outputs_path, weights_only=True)
    torch.save(change(reference), copy / exported.reference_outputs_path.name)
    return dataclasses.replace(exported, directory=copy)


def test_dict_outputs_match_leaf_by_leaf_and_a_wrong_leaf_is_named_by_its_key(
    session: Sme2Session, tmp_path: Path
) -> None:
    exported, profile = _run(session, "dict")
    assert assert_outputs_match(profile, exported) < 1e-4

    def wrong_b(reference: dict) -> dict:
        reference["b"][0, 1, 2, 3] += 0.5
        return reference

    with pytest.raises(AssertionError, match=r"output\['b'\] differs .*largest difference 0\.5"):
        assert_outputs_match(profile, _tampered(exported, tmp_path, wrong_b))


def test_nested_tuple_outputs_match_and_a_wrong_leaf_is_named_by_its_path(session: Sme2Session, tmp_path: Path) -> None:
    exported, profile = _run(session, "nested")
    assert assert_outputs_match(profile, exported) < 1e-4

    def wrong_inner(reference: tuple) -> tuple:
        reference[1][1][0, 0, 0, 0] += 0.5
        return reference

    with pytest.raises(AssertionError, match=r"output\[1\]\[1\] differs .*largest difference 0\.5"):
        assert_outputs_match(profile, _tampered(exported, tmp_path, wrong_inner))


def test_a_reference_of_another_structure_says_both_counts(session: Sme2Session, tmp_path: Path) -> None:
    exported, profile = _run(session, "nested")
    with pytest.raises(AssertionError, match=r"3 outputs, eager gave 2 tensors \(output\[0\], output\[1\]\)"):
        assert_outputs_match(profile, _tampered(exported, tmp_path, lambda r: (r[0], r[1][0])))


def test_a_model_returning_none_is_an_export_error_saying_to_return_tensors(session: Sme2Session) -> None:
    with pytest.raises(ExportError) as caught:
        session.export("none", Recipe())
    message = str(caught.value)
    assert "'none'" in message and "returned no tensors" in message and "must return" in message
    assert "KeyError" not in message
