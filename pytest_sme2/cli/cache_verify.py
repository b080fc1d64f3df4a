"""``pytest-sme2 cache verify``: whether the export cache's entries are what they say they are, without ever
running code the cache names.

Why: a hit checks an entry's files against the digests its export.json stored and its key against the program
traced now, but never lowers the program again (that is the export the cache saves), so a writer who replaced
``model.pte`` and updated its digest is trusted by design (docs/export.md, "Who may write the cache"). A cache
restored from elsewhere (a CI cache, a group folder) can be audited instead: every entry's recorded digests
are checked, as a hit would, and a sample of entries is exported again and compared byte for byte. The sample
is drawn from the system's random source, so whoever forged one entry cannot know whether it will be the one
re-exported.

An audit never runs a writer's code (issue 64): the model an entry is exported again from is the one of its
name that the user's own project registers (its pytest configuration's ``sme2_model_dirs`` and ``sme2_models``,
cli/project_models.py), never the path its export.json records (an ``evil.py`` dropped in the entry and named
there was imported). A sampled entry that cannot be re-derived here (its model not registered, other versions,
ExecuTorch's LLM export) is **not verified**: named, counted apart from verified and differing entries, and the
command exits 1 unless ``--allow-unverified``, so whether the audit happens is never the forger's choice.
The ETRecord is not compared: ExecuTorch writes a different one on every export of the same program.
"""

from __future__ import annotations

import random
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pytest_sme2.errors import Sme2Error, UsageError
from pytest_sme2.export import export_key
from pytest_sme2.export.cache_entry import (
    ENTRY_NAME,
    EXPORT_FORMAT_VERSION,
    INPUTS_NAME,
    META_NAME,
    PTE_NAME,
    REFERENCE_NAME,
    DamagedEntry,
    check_facts,
    check_files,
    meta_problem,
    read_meta,
    record_problem,
)
from pytest_sme2.export.export import Recipe, export, versions
from pytest_sme2.export.llm_export import FLOW as LLM_FLOW
from pytest_sme2.export.llm_export import LLM_FILES
from pytest_sme2.export.work import FACTS_FILE
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.system.digests import file_sha256

# What a re-export must reproduce byte for byte (export.json's files, less the ETRecord, plus the program facts,
# which export.json has no digest of and planned memory is read from).
REPRODUCED = (PTE_NAME, INPUTS_NAME, REFERENCE_NAME, FACTS_FILE)


@dataclass(frozen=True)
class EntryCheck:
    """What verify found of one entry: ``differs`` (why it is not what it says; None when it holds), ``stale``
    (why no session uses it any more), ``rederived`` (exported again from the project's model and equal) or
    ``unverified`` (why it was sampled but could not be exported again here)."""

    entry: Path
    differs: str | None = None
    stale: str | None = None
    rederived: str | None = None
    unverified: str | None = None

    @property
    def state(self) -> str:
        if self.differs:
            return "DIFFERS"
        return "stale" if self.stale else "UNVERIFIED" if self.unverified else "ok"

    @property
    def detail(self) -> str:
        if self.differs or self.stale:
            return str(self.differs or self.stale)
        return (
            "recorded digests hold"
            + (f"; {self.rederived}" if self.rederived else "")
            + (f"; not verified: {self.unverified}" if self.unverified else "")
        )


def entries(cache_dir: Path) -> list[Path]:
    """The export entries of a cache folder (``MODEL-RECIPE-KEY``), not its locks, result cache or staging."""
    if not cache_dir.is_dir():
        raise UsageError(f"no export cache at {cache_dir}: give the folder of --sme2-cache-dir (default .sme2/cache)")
    return sorted(
        p for p in cache_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and ENTRY_NAME.fullmatch(p.name)
    )


def verify(
    cache_dir: Path,
    sample: int,
    registry: ModelRegistry,
    chooser: Callable[[list[Path], int], list[Path]] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> list[EntryCheck]:
    """Every entry's recorded digests checked; ``sample`` of those that hold exported again from the model of
    their name in ``registry`` (the user's project's, cli/project_models.py) and compared. ``chooser`` picks the
    sample (the system's random source by default); ``progress`` hears of each re-export before it runs (a few
    seconds each)."""
    now = versions()
    found = {entry: recorded(entry, now) for entry in entries(cache_dir)}
    holding = [entry for entry, check in found.items() if check.state == "ok"]
    pick = chooser or (lambda items, n: random.SystemRandom().sample(items, n))
    for entry in pick(holding, min(sample, len(holding))):
        found[entry] = rederived(entry, now, registry, progress)
    return list(found.values())


def recorded(entry: Path, now: dict[str, Any]) -> EntryCheck:
    """The checks of a cache hit, without the model: export.json's shape, its key derived again from the program
    digest, recipe and versions it records, the folder's name, each file's digest, the program facts."""
    try:
        meta = read_meta(entry)
        if not isinstance(meta, dict):
            raise DamagedEntry(f"{META_NAME} holds a JSON {type(meta).__name__}, not an object")
        if meta.get("format") != EXPORT_FORMAT_VERSION:
            return EntryCheck(
                entry,
                stale=f"{META_NAME} has format {meta.get('format')!r}; this pytest-sme2 writes "
                f"and reads {EXPORT_FORMAT_VERSION}, so no session uses it: remove it",
            )
        recipe = _recipe(meta)
        if meta.get("flow") == LLM_FLOW:  # ExecuTorch's LLM export: keyed by a config, not a traced program
            return _recorded_llm_export(entry, meta, recipe)
        digest = str(meta.get("program_digest"))
        problem = meta_problem(meta, export_key.cache_key(digest, asdict(recipe), _versions_of(meta, now)), digest)
        if problem:
            raise DamagedEntry(
                f"{problem} (derived again from the program digest, recipe and versions it records)"
                if "cache_key" in problem
                else problem
            )
        named = f"{meta.get('model')}-{recipe.label}-{meta['cache_key']}"
        if entry.name != named:
            raise DamagedEntry(f"its folder is named {entry.name}, and its {META_NAME} answers for {named}")
        check_files(entry, meta)
        check_facts(entry)
    except DamagedEntry as damage:
        return EntryCheck(entry, differs=str(damage))
    return EntryCheck(entry)


def _recorded_llm_export(entry: Path, meta: dict[str, Any], recipe: Recipe) -> EntryCheck:
    """An export_llama entry (export/llm_export.py): its folder name, files and facts. Its key is derived from
    the config and the content of the files the config named, which cache verify does not have."""
    named = f"{meta.get('model')}-{LLM_FLOW}-{recipe.label}-{meta.get('cache_key')}"
    if entry.name != named:
        raise DamagedEntry(f"its folder is named {entry.name}, and its {META_NAME} answers for {named}")
    problem = record_problem(meta, LLM_FILES)
    if problem:
        raise DamagedEntry(problem)
    check_files(entry, meta)
    check_facts(entry)
    return EntryCheck(entry)


def rederived(
    entry: Path, now: dict[str, Any], registry: ModelRegistry, progress: Callable[[str], None] = lambda line: None
) -> EntryCheck:
    """The entry (whose recorded digests hold) exported again from the model of its name that ``registry`` (the
    user's project) registers, with its recipe; its program digest, key and files compared with the fresh
    export's. Nothing the entry records is imported or run: its ``source`` is not read."""
    meta = read_meta(entry)
    if meta.get("flow") == LLM_FLOW:
        return EntryCheck(
            entry,
            unverified="ExecuTorch's LLM export is not exported again here (its config's files may live "
            "elsewhere); its tests with --sme2-fresh export it again",
        )
    other = {name: (meta.get(name), value) for name, value in now.items() if meta.get(name) != value}
    if other:
        then = ", ".join(f"{name} {was}" for name, (was, _) in other.items())
        here = ", ".join(f"{name} {value}" for name, (_, value) in other.items())
        return EntryCheck(
            entry,
            unverified=f"exported with {_short(then)}, this environment has {_short(here)}; "
            "re-export is reproducible only under the same ones: verify where they are",
        )
    name = str(meta.get("model"))
    if name not in registry.names:
        registered = ", ".join(registry.names) or "none"
        return EntryCheck(
            entry,
            unverified=f"model {name!r} is not registered by this project (models: {registered}); verify in "
            "the project whose sme2_model_dirs or sme2_models register it (its folder or --project)",
        )
    recipe = _recipe(meta)
    with tempfile.TemporaryDirectory(prefix="sme2-verify-") as work:
        try:
            model = registry.get(name)
            where = model.source_path or model.module.__name__
            progress(f"exporting {entry.name} again from {where}")
            fresh = export(model, recipe, Path(work))
        except Sme2Error as exc:
            return EntryCheck(
                entry, unverified=f"the project's model {name!r} does not export now: {str(exc).splitlines()[0]}"
            )
        if fresh.program_digest != meta["program_digest"] or fresh.cache_key != meta["cache_key"]:
            return EntryCheck(
                entry,
                differs=f"the project's model {name} ({where}) with recipe {recipe.label} traces to the "
                f"program digest {fresh.program_digest} (key {fresh.cache_key}); its "
                f"{META_NAME} records {meta['program_digest']} (key {meta['cache_key']})",
            )
        for file in REPRODUCED:
            ours, theirs = file_sha256(fresh.directory / file), file_sha256(entry / file, within=entry)
            if ours != theirs:
                return EntryCheck(
                    entry,
                    differs=f"{file} is not what its model exports: sha256 {theirs[:16]} "
                    f"in the entry, {ours[:16]} exported again from {where} with "
                    f"recipe {recipe.label}",
                )
    return EntryCheck(
        entry, rederived=f"exported again from {where}: the same program digest, key and {', '.join(REPRODUCED)}"
    )


def _recipe(meta: dict[str, Any]) -> Recipe:
    """The entry's recipe; DamagedEntry naming it when export.json's is not one (an unknown dtype or key)."""
    recipe = meta.get("recipe")
    try:
        if not isinstance(recipe, dict):
            raise TypeError("not an object")
        return Recipe(**recipe)
    except (TypeError, UsageError) as exc:
        raise DamagedEntry(f"{META_NAME}'s recipe {recipe!r} is not a recipe ({exc})") from None


def _versions_of(meta: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """The versions an entry records, under the names of those in every key now."""
    return {name: meta.get(name) for name in now}


def _short(text: str) -> str:
    """Digests (the export code's) cut to 12 characters: the line names which changed, not the whole hash."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{20,}\b", r"\1...", text)
