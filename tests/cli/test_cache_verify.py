"""`pytest-sme2 cache verify`: every entry's recorded digests checked, a sample exported again from its model source
and compared, so an entry whose program was replaced with its digest updated (which a cache hit trusts) is found.

A cache of the tiny model under two recipes, exported once per module and copied into each test's folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import TINY_MODEL, export_tiny_both_ways
from pytest_sme2.cli import main
from pytest_sme2.export.cache_entry import META_NAME, PTE_NAME
from pytest_sme2.system.digests import file_sha256


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder with the tiny model's source and a cache of it exported with XNNPACK and without."""
    root = tmp_path_factory.mktemp("verify")
    return export_tiny_both_ways(root)


def _project(pristine: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the pristine project (its pytest.ini registers tiny.py, as a user's project registers its models):
    the cache, the XNNPACK entry and the other one. The entries keep the pristine project's path as their source:
    verify never reads it."""
    shutil.copy(pristine / "tiny.py", tmp_path / "tiny.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nsme2_models = tiny = tiny.py\n")
    shutil.copytree(pristine / "cache", tmp_path / "cache")
    [xnnpack] = (tmp_path / "cache").glob("tiny-fp32-xnnpack-*")
    [portable] = (tmp_path / "cache").glob("tiny-fp32-none-*")
    return tmp_path / "cache", xnnpack, portable


def _verify(capsys: pytest.CaptureFixture[str], *args: str, project: Path | None = None) -> tuple[int, str, str]:
    """The command's exit code and output, its project ``project`` (default: the cache's parent folder)."""
    where = project if project is not None else Path(args[0]).parent
    code = main(["cache", "verify", *args, "--project", str(where)])
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
            f"        ok  {entry.name}  recorded digests hold; exported again from {tmp_path / 'tiny.py'}: the same "
            f"program digest, key and model.pte, inputs.pt, reference_outputs.pt, program.json" in out
        )
    assert f"models re-derived from: {tmp_path / 'pytest.ini'} (registers pytest_sme2.reference_mlp, tiny)" in out
    assert f"2 export cache entries in {cache}: 2 verified (exported again and equal), 0 differ, 0 not verified" in out
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
    assert code == 0 and "0 verified (exported again and equal), 0 differ, 0 not verified" in out
    code, out, _ = _verify(capsys, str(cache), "--sample", "2")
    assert code == 1, out
    assert (
        f"   DIFFERS  {xnnpack.name}  model.pte is not what its model exports: sha256 "
        f"{file_sha256(portable / PTE_NAME)[:16]} in the entry," in out
    )
    assert f"exported again from {tmp_path / 'tiny.py'} with recipe fp32-xnnpack" in out
    assert "1 verified (exported again and equal), 1 differ, 0 not verified" in out


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
    assert re.search(rf"   DIFFERS  {re.escape(xnnpack.name)}  {expected}", out), out
    assert "1 differ" in out


def test_an_entry_whose_model_the_project_does_not_register_is_not_verified_and_fails(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 64: an entry verify cannot re-derive here is said not verified, counted apart, and the command exits 1
    unless --allow-unverified (its model source missing used to pass as ok, exit 0)."""
    cache, xnnpack, _ = _project(pristine, tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    code, out, _ = _verify(capsys, str(cache), "--sample", "2")
    assert code == 1, out
    assert (
        f"UNVERIFIED  {xnnpack.name}  recorded digests hold; not verified: model 'tiny' is not registered by this "
        "project (models: pytest_sme2.reference_mlp); verify in the project whose sme2_model_dirs or "
        "sme2_models register it" in out
    )
    assert "0 verified (exported again and equal), 0 differ, 2 not verified" in out
    code, out, _ = _verify(capsys, str(cache), "--sample", "2", "--allow-unverified")
    assert code == 0 and "2 not verified (--allow-unverified)" in out


def test_verify_never_imports_a_source_the_entry_names(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 64 (bad 1): an evil.py dropped in the entry and named as its "source" was imported by verify (it
    wrote a marker), then the entry was called ok. The model is the project's own tiny.py; evil.py never runs."""
    cache, xnnpack, portable = _project(pristine, tmp_path)
    marker = tmp_path / "ran"
    for entry in (xnnpack, portable):
        (entry / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n" + TINY_MODEL)
        _rewrite(entry, {"source": str(entry / "evil.py")})
    code, out, _ = _verify(capsys, str(cache), "--sample", "5")
    assert not marker.exists()
    assert code == 0, out
    assert f"exported again from {tmp_path / 'tiny.py'}: the same program digest" in out
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the project registers nothing: still nothing imported
    code, out, _ = _verify(capsys, str(cache), "--sample", "5")
    assert not marker.exists() and code == 1 and "2 not verified" in out


@pytest.mark.parametrize("source", [None, "/nowhere/tiny.py"])
def test_a_forged_program_whose_source_the_forger_removed_still_differs(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str | None
) -> None:
    """Issue 64 (bad 2): another model's program with its digest updated and "source" null or missing passed
    `--sample 99` as `ok ... not re-exported`, exit 0: whether the audit happened was the forger's choice."""
    cache, xnnpack, portable = _project(pristine, tmp_path)
    shutil.copy(portable / PTE_NAME, xnnpack / PTE_NAME)
    meta = json.loads((xnnpack / META_NAME).read_text())
    _rewrite(xnnpack, {"files": {**meta["files"], PTE_NAME: file_sha256(xnnpack / PTE_NAME)}, "source": source})
    code, out, _ = _verify(capsys, str(cache), "--sample", "99")
    assert code == 1, out
    assert f"   DIFFERS  {xnnpack.name}  model.pte is not what its model exports" in out
    assert "1 verified (exported again and equal), 1 differ, 0 not verified" in out
    elsewhere = tmp_path / "elsewhere"  # verify run where no project registers tiny: not verified, not ok
    elsewhere.mkdir()
    (elsewhere / "pytest.ini").write_text("[pytest]\n")
    code, out, _ = _verify(capsys, str(cache), "--sample", "99", project=elsewhere)
    assert code == 1 and f"UNVERIFIED  {xnnpack.name}" in out and "2 not verified" in out, out


def test_a_folder_that_is_no_cache_and_a_negative_sample_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _verify(capsys, str(tmp_path / "nowhere"))
    assert code == 2 and f"pytest-sme2 cache verify: no export cache at {tmp_path / 'nowhere'}" in err
    with pytest.raises(SystemExit):
        main(["cache", "verify", str(tmp_path), "--sample", "-1"])
    assert "'-1' is not a whole number >= 0" in capsys.readouterr().err
