"""Issue 65's EfficientSAM case on the executorch wheel's own model code, counted end to end: one more encoder
block is named by its own new name. A file of its own: its two exports are the slowest of the change headlines,
and its module cache makes it one xdist group, which runs beside test_change_headlines.py's instead of after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_emulated import counted_profiles

from pytest_sme2.gate import findings
from pytest_sme2.gate.baselines import record_of
from pytest_sme2.gate.judge import judge
from pytest_sme2.gate.verdict import Status
from pytest_sme2.run import emulation_setup

STATUS = emulation_setup.status()
pytestmark = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("efficient-sam-headlines-cache")


def _regressions(verdicts: list, check: str) -> list:
    return [v for v in verdicts if v.check == check and v.status == Status.REGRESSION]


EFFICIENT_SAM = '''
"""The executorch wheel's own EfficientSAM (ViT-T, random weights) at 32x32 with its first BLOCKS encoder blocks."""
import torch
from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam import build_efficient_sam


def get_eager_model():
    torch.manual_seed(0)  # all 12 blocks built after one seed: block 2 has weights blocks 0 and 1 never had
    sam = build_efficient_sam(encoder_patch_embed_dim=192, encoder_num_heads=3, checkpoint=None)
    sam.image_encoder.blocks = sam.image_encoder.blocks[:{blocks}]
    sam.image_encoder.img_size, sam.image_encoder.image_embedding_size = 32, 2
    sam.prompt_encoder.image_embedding_size, sam.prompt_encoder.input_image_size = (2, 2), (32, 32)
    return sam.eval()


def get_example_inputs():
    generator = torch.Generator().manual_seed(1)
    images = torch.randn((1, 3, 32, 32), generator=generator)
    return images, torch.rand((1, 1, 1, 2), generator=generator) * 32, torch.ones((1, 1, 1))
'''


def _efficient_sam_judged(tmp_path: Path, cache: Path) -> tuple[list[str], list]:
    """The wheel's EfficientSAM with 2 encoder blocks, then 3, counted SME2 on and judged (exports and counts in
    the module's cache: the second test of the pair reads both from it)."""
    [then], [now] = (
        counted_profiles(tmp_path / f"b{n}", "sam", [True], source=EFFICIENT_SAM.format(blocks=n), cache=cache)
        for n in (2, 3)
    )
    verdicts = judge("sam[on]", record_of(now), record_of(then))
    return findings.message_lines(findings.findings(verdicts)), verdicts


def test_the_wheels_efficient_sam_with_one_more_encoder_block_names_the_new_block(tmp_path: Path, cache: Path) -> None:
    # issue 65: EfficientSAM with a 13th encoder block read "image_encoder.blocks: 12 -> 13 blocks
    # (image_encoder.blocks.0 added)", a name the new block does not have. Here 2 -> 3 blocks of the same code
    # (written before the run: the appended block is image_encoder.blocks.2, and blocks .0 and .1 are unchanged).
    lines, verdicts = _efficient_sam_judged(tmp_path, cache)
    assert lines[0].startswith(
        "sam[on]: image_encoder.blocks: 2 -> 3 blocks (image_encoder.blocks.2 added): instructions per inference +"
    ), lines
    assert not _regressions(verdicts, "op_instructions"), lines  # blocks .0 and .1 are themselves, unchanged


def test_the_wheels_efficient_sam_with_one_more_encoder_block_reads_no_operator_gone(
    tmp_path: Path, cache: Path
) -> None:
    # issue 65: two Multiply operators after the encoder have no graph node of their own; named after the last
    # node before them, they moved from blocks.1 to the new blocks.2 (which brings Multiplies of its own) and read
    # as gone. They stand before the same neck node on both sides, and pair by it.
    _, verdicts = _efficient_sam_judged(tmp_path, cache)
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("new")]
    assert not ops.evidence["gone"], ops
