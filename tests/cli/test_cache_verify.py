"""`pytest-sme2 cache verify`: every entry's recorded digests checked, a sample exported again from its model source
and compared, so an entry whose program was replaced with its digest updated (which a cache hit trusts) is found.

A cache of the tiny model under two recipes, exported once per module and copied into each test's folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import TINY_MODEL
from pytest_sme2 import Recipe
from pytest_sme2.cli import main
from pytest_sme2.export.cache_entry import META_NAME, PTE_NAME
from pytest_sme2.export.export import export
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.system.digests import file_sha256


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with the tiny model's source and a cache of it exported with XNNPACK and without."""
    root = tmp_path_factory.mktemp("verify")
    (root / "tiny.py").write_text(TINY_MODEL)
    registry = ModelRegistry()
    registry.register("tiny", str(root / "tiny.py"))
    for recipe in (Recipe(), Recipe(partitioner="none")):
        export(registry.get("tiny"), recipe, root / "cache")
    return root


def _project(pristine: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the pristine project whose entries record its own model source: the cache, the XNNPACK entry and
    the other one."""
    shutil.copy(pristine / "tiny.py", tmp_path / "tiny.py")
    shutil.copytree(pristine / "cache", tmp_path / "cache")
    for meta in (tmp_path / "cache").glob(f"*/{META_NAME}"):
        data = json.loads(meta.read_text())
        data["source"] = str(tmp_path / "tiny.py")  # not a digest's subject: any entry may be moved like this
        meta.write_text(json.dumps(data))
    [xnnpack] = (tmp_path / "cache").glob("tiny-fp32-xnnpack-*")
    [portable] = (tmp_path / "cache").glob("tiny-fp32-none-*")
    return tmp_path / "cache", xnnpack, portable


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cache", "verify", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _rewrite(entry: Path, change: "dict[str, object]") -> None:
    meta = json.loads((entry / META_NAME).read_text())
    meta.update(change)
    (entry / META_NAME).write_text(json.dumps(meta))


def test_honest_entries_hold_and_each_sampled_one_is_exported_again_equal(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, xnnpack, portable = _project(pristine, tmp_path)
    code, out, _ = _verify(capsys, str(cache), "--sample", "5")
    assert code == 0, out
    for entry in (xnnpack, portable):
        assert (
            f"     ok  {entry.name}  recorded digests hold; exported again from {tmp_path / 'tiny.py'}: the same "
            f"program digest, key and model.pte, inputs.pt, reference_outputs.pt, program.json" in out
        )
    assert f"2 export cache entries in {cache}: 0 differ, 2 exported again and equal" in out
    assert not list(cache.glob(".staging-*")) and sorted(p.name for p in cache.iterdir() if p.is_dir()) == sorted(
        ["locks", xnnpack.name, portable.name]
    )  # the re-exports went elsewhere


def test_a_program_replaced_with_its_digest_updated_differs_once_exported_again(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another recipe's program in the XNNPACK entry, its sha256 in export.json updated: every check of a cache hit
    holds (so --sample 0 passes it), and exporting it again from its source shows the program is not its own."""
    cache, xnnpack, portable = _project(pristine, tmp_path)
    shutil.copy(portable / PTE_NAME, xnnpack / PTE_NAME)
    meta = json.loads((xnnpack / META_NAME).read_text())
    _rewrite(xnnpack, {"files": {**meta["files"], PTE_NAME: file_sha256(xnnpack / PTE_NAME)}})
    code, out, _ = _verify(capsys, str(cache), "--sample", "0")
    assert code == 0 and "0 differ, 0 exported again" in out
    code, out, _ = _verify(capsys, str(cache), "--sample", "2")
    assert code == 1, out
    assert (
        f"DIFFERS  {xnnpack.name}  model.pte is not what its model source exports: sha256 "
        f"{file_sha256(portable / PTE_NAME)[:16]} in the entry," in out
    )
    assert f"exported again from {tmp_path / 'tiny.py'} with recipe fp32-xnnpack" in out
    assert "1 differ, 1 exported again and equal" in out


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("inputs", r"inputs.pt \(\d+ bytes\) is not what was exported"),
        ("renamed", r"its folder is named tiny-fp32-xnnpack-0{24}, and its export.json answers for tiny-fp32-xnnpack-"),
        (
            "versions",
            r"export.json's cache_key is '\w+', not this entry's '\w+' \(derived again from the program digest",
        ),
        ("recipe", r"export.json's recipe \{'dtype': 'fp64'.* is not a recipe"),
    ],
)
def test_every_entry_s_recorded_digests_are_checked_without_exporting(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, expected: str
) -> None:
    import re

    cache, xnnpack, _ = _project(pristine, tmp_path)
    if damage == "inputs":
        (xnnpack / "inputs.pt").write_bytes((xnnpack / "inputs.pt").read_bytes() + b"x")
    elif damage == "renamed":
        xnnpack = xnnpack.rename(xnnpack.with_name("tiny-fp32-xnnpack-" + "0" * 24))
    elif damage == "versions":  # a key that other versions would give: not the one its versions give
        _rewrite(xnnpack, {"torch": "0.0.1"})
    else:
        _rewrite(xnnpack, {"recipe": {"dtype": "fp64", "quant": None, "partitioner": "xnnpack"}})
    code, out, _ = _verify(capsys, str(cache), "--sample", "0")
    assert code == 1, out
    assert re.search(rf"DIFFERS  {re.escape(xnnpack.name)}  {expected}", out), out
    assert "1 differ" in out


def test_an_entry_whose_model_source_is_gone_is_said_not_exported_again(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, xnnpack, _ = _project(pristine, tmp_path)
    (tmp_path / "tiny.py").unlink()
    code, out, _ = _verify(capsys, str(cache), "--sample", "2")
    assert code == 0, out
    assert (
        f"     ok  {xnnpack.name}  recorded digests hold; not re-exported: its model source {tmp_path / 'tiny.py'} "
        f"is missing here: verify in the checkout that has it" in out
    )
    assert "0 differ, 0 exported again and equal" in out


def test_a_folder_that_is_no_cache_and_a_negative_sample_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _verify(capsys, str(tmp_path / "nowhere"))
    assert code == 2 and f"pytest-sme2 cache: no export cache at {tmp_path / 'nowhere'}" in err
    with pytest.raises(SystemExit):
        main(["cache", "verify", str(tmp_path), "--sample", "-1"])
    assert "'-1' is not a whole number >= 0" in capsys.readouterr().err
