"""check_program on a real exported .pte and on broken copies of it."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from pytest_sme2.errors import ProgramError
from pytest_sme2.export.program import check_program


@pytest.fixture(scope="module")
def pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()
    ep = torch.export.export(model, (torch.ones(1, 4),))
    buffer = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    path = tmp_path_factory.mktemp("pte") / "linear.pte"
    path.write_bytes(buffer)
    return path


def test_real_program_passes(pte: Path) -> None:
    assert check_program(pte) == pte
    assert check_program(str(pte)) == pte


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.pte"
    with pytest.raises(ProgramError, match=re.escape(str(path))):
        check_program(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pte"
    path.write_bytes(b"")
    with pytest.raises(ProgramError, match=re.escape(str(path))):
        check_program(path)


# Header-sized cuts (4, 10, 20, 30, 38) and body cuts (half, len-7, len-1).
@pytest.mark.parametrize("cut", ["4", "10", "20", "30", "38", "half", "len-7", "len-1"])
def test_truncated_program(pte: Path, tmp_path: Path, cut: str) -> None:
    data = pte.read_bytes()
    length = {"half": len(data) // 2, "len-7": len(data) - 7, "len-1": len(data) - 1}.get(cut) or int(cut)
    path = tmp_path / f"cut{length}.pte"
    path.write_bytes(data[:length])
    with pytest.raises(ProgramError, match=re.escape(str(path))):
        check_program(path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_garbage_bytes(tmp_path: Path, seed: int) -> None:
    data = random.Random(seed).randbytes(4096)
    assert data[4:6] != b"ET"
    path = tmp_path / f"garbage{seed}.pte"
    path.write_bytes(data)
    with pytest.raises(ProgramError, match=re.escape(str(path))):
        check_program(path)


def test_etdump_is_not_a_program(tmp_path: Path) -> None:
    from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump

    path = write_synthetic_etdump(
        tmp_path / "trace.pte", [("Execute", [SyntheticEvent(0, 10, name="Method::execute")])]
    )
    with pytest.raises(ProgramError, match="not an ExecuTorch program"):
        check_program(path)
