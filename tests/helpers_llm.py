"""Shared steps of the language-model tests: the eager reference of a prefill-then-decode sequence, and the
phases of a bundled model profiled on an adb stand-in device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pytest_sme2 import Recipe
from pytest_sme2.measure.llm import LlmProfile, LlmSequence, llm_phases
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run.targets import RunSpec

MODELS = Path(__file__).resolve().parents[1] / "models"


def eager_sequence(model: Any, sequence: LlmSequence) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch eager's logits of the prefill and of the last decode step of a registered model, the cache
    carried between the calls as the runner carries it."""
    eager = model.get_eager_model()
    prefill_plan, decode_plan = sequence.plans(model.get_example_inputs())
    with torch.no_grad():
        prefill = eager(*prefill_plan.calls[0])
        last = None
        for call in decode_plan.calls:
            last = eager(*call)
    return prefill, last


def adb_llm_phases(
    server: str, serial: str, cache_dir: Path, artifacts: Path, model_name: str, sequence: LlmSequence, spec: RunSpec
) -> tuple[LlmProfile, Any]:
    """The bundled ``model_name``'s phases on stand-in device ``serial`` (its session closed), and the model."""
    session = Sme2Session(
        Settings(
            target=f"adb:{serial}", cache_dir=cache_dir, session_dir=artifacts, target_options={"adb_server": server}
        )
    )
    try:
        session.registry.register_dir(MODELS)
        exported = session.export(model_name, Recipe())
        example = tuple(torch.load(exported.inputs_path, weights_only=True))
        phases = llm_phases(exported, Runner(session, spec, session.test_dir("llm")), sequence, example)
        return phases, session.registry.get(model_name)
    finally:
        session.close()


def last_output(profile: Any) -> torch.Tensor:
    """The first output tensor of a profile's last run (the runner keeps the last run's outputs)."""
    return torch.load(profile.artifacts["outputs"], weights_only=True)[0]
