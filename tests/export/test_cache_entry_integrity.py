"""The export cache entry is never changed through a session's artifacts, and a damaged entry is reported
naming the entry, thrown away and exported again, never used (issue 23, item 5 and the weak items on
cache metadata and program.json's mode)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import warnings
from pathlib import Path
from typing import Callable

import pytest
from helpers_versions import needs_binding_etdump

from conftest import TINY_MODEL
from pytest_sme2 import Recipe
from pytest_sme2.errors import DamagedCacheEntryWarning
from pytest_sme2.export.export import ExportedModel, export
from pytest_sme2.export.work import FACTS_FILE, write_facts
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.run.targets import RunSpec
from pytest_sme2.system.safe_files import copy_file


def _tiny(tmp_path: Path) -> ModelRegistry:
    source = tmp_path / "tiny.py"
    source.write_text(TINY_MODEL)
    registry = ModelRegistry()
    registry.register("tiny", str(source))
    return registry


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A cache holding one good export of the tiny model, and its program's bytes (copied, never used)."""
    root = tmp_path_factory.mktemp("pristine")
    exported = export(_tiny(root).get("tiny"), Recipe(), root / "cache")
    return root / "cache", exported.path.read_bytes()


def _cache_copy(pristine: tuple[Path, bytes], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the pristine cache, and its one entry."""
    cache = tmp_path / "cache"
    shutil.copytree(pristine[0], cache)
    [entry] = [p for p in cache.iterdir() if p.name.startswith("tiny-")]
    return cache, entry


def _export_again(tmp_path: Path, cache: Path) -> tuple[ExportedModel, list[str]]:
    """Export as a new session would, with the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = export(_tiny(tmp_path).get("tiny"), Recipe(), cache)
    return exported, [str(w.message) for w in caught if issubclass(w.category, DamagedCacheEntryWarning)]


@needs_binding_etdump
def test_writing_over_an_artifact_leaves_the_next_sessions_program_right(
    pristine: tuple[Path, bytes], tmp_path: Path
) -> None:
    # Artifacts are links into the cache (issue 63: no copy of a large program per test). Writing over one writes
    # the entry (root ignores its read-only mode): the next session must notice, say so and export again, and never
    # run that program under this model's name (issue 23's bug, when entries were not checked on every use).
    cache, _ = _cache_copy(pristine, tmp_path)
    session = Sme2Session(Settings(target="host", cache_dir=cache, session_dir=tmp_path / "run"), _tiny(tmp_path))
    try:
        exported = session.export("tiny", Recipe())
        Runner(session, RunSpec(runs=1, warmup=0), session.test_dir("test_one")).profile(exported)
    finally:
        session.close()
    [artifact] = (tmp_path / "run" / "test_one").glob("*.pte")
    assert os.path.samefile(artifact, exported.path)  # a link, not a copy
    artifact.chmod(0o644)  # as root, whom the read-only mode does not stop
    with open(artifact, "r+b") as handle:  # written in place, as `cp other.pte <artifact>` or `: >` do
        handle.truncate(0)
        handle.write(b"another program")
    again, messages = _export_again(tmp_path, cache)
    assert again.path.read_bytes() == pristine[1]
    assert not again.from_cache and messages and "model.pte" in messages[0], messages


def test_an_artifact_is_a_fresh_copy_even_over_a_link(tmp_path: Path) -> None:
    source = tmp_path / "entry.pte"
    source.write_bytes(b"program")
    outside = tmp_path / "outside"
    outside.write_bytes(b"not ours")
    destination = tmp_path / "test" / "model.pte"
    destination.parent.mkdir()
    destination.symlink_to(outside)
    copy_file(source, destination)
    assert not destination.is_symlink() and destination.read_bytes() == b"program"
    assert outside.read_bytes() == b"not ours"  # replaced the link, did not write through it
    destination.write_bytes(b"changed by the user")
    assert source.read_bytes() == b"program"  # a copy: the source never changes with it


def _truncate(entry: Path) -> None:
    pte = entry / "model.pte"
    pte.write_bytes(pte.read_bytes()[:1000])


def _flip_a_byte(entry: Path) -> None:
    pte = entry / "model.pte"
    data = bytearray(pte.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pte.write_bytes(bytes(data))


def _meta(entry: Path, change: Callable[[dict], object]) -> None:
    path = entry / "export.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(change(meta)))


def _facts(entry: Path, change: Callable[[dict], object]) -> None:
    path = entry / FACTS_FILE
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _without(key: str) -> Callable[[dict], dict]:
    return lambda document: {k: v for k, v in document.items() if k != key}


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated program": (_truncate, "model.pte"),
    "changed program byte": (_flip_a_byte, "model.pte"),
    "changed reference outputs": (lambda e: (e / "reference_outputs.pt").write_bytes(b"x"), "reference_outputs.pt"),
    "missing program": (lambda e: (e / "model.pte").unlink(), "model.pte"),
    "missing export.json": (lambda e: (e / "export.json").unlink(), "export.json"),
    "export.json not JSON": (lambda e: (e / "export.json").write_text("{not json"), "export.json"),
    "export.json is a list": (lambda e: (e / "export.json").write_text("[]"), "export.json"),
    "export_seconds not a number": (lambda e: _meta(e, lambda m: {**m, "export_seconds": "fast"}), "export_seconds"),
    "delegation count not a number": (
        lambda e: _meta(e, lambda m: {**m, "delegation": {**m["delegation"], "delegated_nodes": "many"}}),
        "delegated_nodes",
    ),
    "file digests missing": (lambda e: _meta(e, _without("files")), "files"),
    "program.json missing a key": (lambda e: _facts(e, _without("planned_buffers")), "planned_buffers"),
    "program.json is a list": (lambda e: (e / FACTS_FILE).write_text("[1]"), FACTS_FILE),
    "missing program.json": (lambda e: (e / FACTS_FILE).unlink(), FACTS_FILE),
    # issue 64 (bad 8): a FIFO (a tar archive restores one) hung the session in file_sha256; a link out of the
    # entry is another writer's file
    "program is a FIFO": (lambda e: _fifo(e / "model.pte"), "model.pte is a FIFO (named pipe), not a regular file"),
    "export.json is a FIFO": (lambda e: _fifo(e / "export.json"), "export.json is a FIFO"),
    "program.json is a FIFO": (lambda e: _fifo(e / FACTS_FILE), f"{FACTS_FILE} is a FIFO"),
    "inputs a link out of the entry": (
        lambda e: _link_out(e / "inputs.pt"),
        "inputs.pt is a link to",
    ),
}


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_out(path: Path) -> None:
    outside = path.parent.parent.parent / f"outside-{path.name}"
    shutil.copy(path, outside)
    path.unlink()
    path.symlink_to(outside)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_entry_is_reported_by_its_path_and_exported_again(
    case: str, pristine: tuple[Path, bytes], tmp_path: Path
) -> None:
    damage, named = DAMAGE[case]
    cache, entry = _cache_copy(pristine, tmp_path)
    damage(entry)
    exported, messages = _export_again(tmp_path, cache)
    assert len(messages) == 1, messages
    assert str(entry) in messages[0] and named in messages[0] and "exported again" in messages[0]
    assert not exported.from_cache and exported.directory == entry
    assert exported.path.read_bytes() == pristine[1]
    again, messages = _export_again(tmp_path, cache)  # the new entry is whole
    assert again.from_cache and not messages


def test_program_json_honours_the_umask(pristine: tuple[Path, bytes], tmp_path: Path) -> None:
    # A shared cache under umask 002: every file in it must be group-writable as the umask asks.
    old = os.umask(0o002)
    try:
        write_facts({"version": 0}, tmp_path / FACTS_FILE)
        cache = tmp_path / "cache"
        exported = export(_tiny(tmp_path).get("tiny"), Recipe(), cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / FACTS_FILE).stat().st_mode) == 0o664
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in exported.directory.iterdir()}
    assert set(modes.values()) == {0o664}, modes


OTHER_MODEL = TINY_MODEL.replace("8 * 14 * 14, 10", "8 * 10 * 10, 4").replace("(1, 3, 16, 16)", "(1, 3, 12, 12)")


def test_another_models_files_with_their_digests_in_export_json_are_not_used(
    pristine: tuple[Path, bytes], tmp_path: Path
) -> None:
    """Every file of the entry replaced by another model's export, and export.json's digests updated to match:
    each file is what export.json says, yet the program is not the one this model traces to. Not used."""
    cache, entry = _cache_copy(pristine, tmp_path)
    source = tmp_path / "other.py"
    source.write_text(OTHER_MODEL)
    registry = ModelRegistry()
    registry.register("other", str(source))
    other = export(registry.get("other"), Recipe(), tmp_path / "other-cache")
    for name in ("model.pte", "model.etrecord", "inputs.pt", "reference_outputs.pt", FACTS_FILE):
        shutil.copyfile(other.directory / name, entry / name)
    forged = json.loads((other.directory / "export.json").read_text())["files"]
    _meta(entry, lambda meta: {**meta, "files": forged})
    exported, messages = _export_again(tmp_path, cache)
    assert len(messages) == 1 and str(entry) in messages[0], messages
    assert "inputs.pt is not tiny's example inputs" in messages[0]
    assert not exported.from_cache and exported.path.read_bytes() == pristine[1]


@pytest.mark.parametrize(
    "claim",
    [{"recipe": {"dtype": "fp16", "quant": None, "partitioner": "xnnpack"}}, {"model": "other"}, {"torch": "0.0.1"}],
)
def test_an_entry_whose_export_json_claims_another_export_is_not_used(
    claim: dict, pristine: tuple[Path, bytes], tmp_path: Path
) -> None:
    """What export.json says the entry came from (recipe, model, tool versions) must derive this entry's key."""
    cache, entry = _cache_copy(pristine, tmp_path)
    _meta(entry, lambda meta: {**meta, **claim})
    exported, messages = _export_again(tmp_path, cache)
    assert len(messages) == 1 and "answers for" in messages[0], messages
    assert not exported.from_cache and exported.path.read_bytes() == pristine[1]
