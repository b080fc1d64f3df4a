"""Per-process session state: settings, model registry, export cache, target, artifacts.

Kept apart from plugin.py so the hooks stay thin and this logic can be used
without pytest (benchmarks, the command line).
"""

from __future__ import annotations

import calendar
import os
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_sme2.export.export import ExportedModel, Recipe, export, export_code_digest
from pytest_sme2.model.registry import ModelRegistry, default_registry
from pytest_sme2.run.result_cache import RESULTS_FOLDER, ResultCache, code_digest
from pytest_sme2.run.targets import RunSpec, Target, TargetSettings, make_target
from pytest_sme2.run.targets.base import AUTO_REPLICAS, DEFAULT_TIMEOUT_S
from pytest_sme2.system.names import slug
from pytest_sme2.system.writable_folders import Place, option_and_ini


@dataclass(frozen=True)
class Settings:
    target: str = "auto"
    runs: int | None = None  # None: the target's default (RunSpec.runs on hardware, fewer under emulation)
    warmup: int | None = None
    max_rounds: int = RunSpec.max_rounds
    # RunSpec.replicas: a baseline update's --sme2-baseline-replicas, else --sme2-replicas ("auto": per test)
    replicas: int | str = AUTO_REPLICAS
    check_replicas: int | str = AUTO_REPLICAS  # --sme2-replicas: what a baseline must serve (baseline_quality)
    threads: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    cache_dir: Path = Path(".sme2/cache")
    session_dir: Path = Path(".sme2/artifacts/session")
    runner: Path | None = None  # local target: one build (SME2 off by masking)
    runner_on: Path | None = None  # local target: two builds
    runner_off: Path | None = None
    # The registered targets' own settings by option name (--sme2-emulated-svl is "emulated_svl", --sme2-adb-server
    # "adb_server"); each target reads its own, an absent one is its default (run/targets/registry.py).
    target_options: Mapping[str, Any] = field(default_factory=dict)
    # Run the reference program before each timed run, so latency can be gated relative to it
    # (reference_program.py); off only for runners that cannot (a user's own executor_runner).
    latency_reference: bool = True
    # Sample which kernels took each operator's time in one more runner process per profile (kernel_sampling.py);
    # None: off.
    kernel_sampling: Any = None
    # adb and local targets: wait before each chunk until the device is this cool (device_state.py);
    # None: no wait.
    cooldown_c: float | None = None
    cooldown_max_s: float = 300.0


# A session's folder under the artifacts folder: session-YYYYMMDD-HHMMSS-PID-RANDOM, its start in UTC, the pid of
# the process that made it (the controller under xdist) and 32 random bits (times and pids are not unique across
# containers). pytest-sme2 cache prune tells a session folder by this name, and reads its start and pid from it.
SESSION_NAME = re.compile(r"session-(\d{8}-\d{6})-(\d+)-[0-9a-f]+")


def session_folder_name(started: float | None = None, pid: int | None = None) -> str:
    """The folder name of a session started at ``started`` (epoch seconds; now) by ``pid`` (this process)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if started is None else started))
    return f"session-{stamp}-{os.getpid() if pid is None else pid}-{secrets.token_hex(4)}"


def session_started(name: str) -> tuple[float, int] | None:
    """The start (epoch seconds) and pid a session folder's name records; None for a name that is not one."""
    found = SESSION_NAME.fullmatch(name)
    if found is None:
        return None
    try:
        started = calendar.timegm(time.strptime(found.group(1), "%Y%m%d-%H%M%S"))
    except ValueError:  # session-99999999-...: the shape, not a time
        return None
    return float(started), int(found.group(2))


def kit_variant(variant: str) -> str:
    """``local sme2=on threads=1`` -> ``local sme2_on threads=1``, as a variant appears in folder and file names:
    the reference kit's tools tell SME2 on and off apart by ``sme2_on``/``sme2_off`` in paths."""
    return variant.replace("sme2=", "sme2_")


class Sme2Session:
    def __init__(self, settings: Settings, registry: ModelRegistry | None = None):
        # The result and export caches key answers by the package's code. Digest it now, as this process has
        # just imported it, not at the first counted run or export: code edited while a session runs would
        # otherwise key answers of the old code as the new code's (seen: counts without event positions under
        # a new key).
        code_digest()
        export_code_digest()
        self.settings = settings
        self.registry = registry or ModelRegistry(parent=default_registry())
        self._target: Target | None = None
        self._exports: dict[tuple[str, Recipe], ExportedModel] = {}
        self._reference: ExportedModel | None = None
        self.program_facts: dict[str, Any] = {}  # .pte path -> work.ProgramFacts, read once per process
        # export cache key -> the provenance pointers of its baseline records (registry.source_files of the model's
        # code, runner.input_signature of its inputs), read once per session (not per process: an in-process pytest
        # session after an edit must see the edit)
        self.provenance_pointers: dict[str, dict[str, Any]] = {}
        # The device's state at the session's first round: what later rounds' frequency caps are judged against.
        self.steady_state: Any = None
        # Where the session says what it waits for (the plugin's progress line; silent outside pytest).
        self.say: Callable[[str], None] = lambda text: None
        # The cache's counted-run records (count_records.py), read at the first counted run, added to after each.
        self.count_records: list[Any] | None = None
        # The typical guest instructions expected of the counted run now going, by SME2 setting ("sme2=on"): what
        # the progress line counts towards (count_estimate.py)
        self.expected_instructions: dict[str, float] = {}

    @property
    def target(self) -> Target:
        if self._target is None:
            s = self.settings
            self._target = make_target(
                s.target,
                TargetSettings(
                    s.session_dir / "logs",
                    s.runner,
                    s.runner_on,
                    s.runner_off,
                    results=ResultCache(s.cache_dir / RESULTS_FOLDER),
                    options=s.target_options,
                ),
            )
        return self._target

    def default_runs(self) -> tuple[int, int]:
        """Timed and warmup runs when nothing sets them: the settings, else the target's defaults."""
        # Hardware targets use RunSpec's defaults; a target may set fewer (the emulated one does).
        runs = (
            self.settings.runs if self.settings.runs is not None else getattr(self.target, "default_runs", RunSpec.runs)
        )
        warmup = (
            self.settings.warmup
            if self.settings.warmup is not None
            else getattr(self.target, "default_warmup", RunSpec.warmup)
        )
        return runs, warmup

    def export(self, name: str, recipe: Recipe) -> ExportedModel:
        """The model's .pte for the recipe; only the first request in a process may export."""
        key = (name, recipe)
        if key in self._exports:
            return replace(self._exports[key], from_cache=True)
        model = self.registry.get(name)
        self._exports[key] = export(model, recipe, self.settings.cache_dir)
        return self._exports[key]

    def reference(self) -> ExportedModel | None:
        """The reference program runs interleave with timed runs, or None: turned off, or emulated timing
        (never compared, so the reference would only cost emulation time)."""
        if not self.settings.latency_reference or self.target.info.emulated:
            return None
        if self._reference is None:
            from pytest_sme2.export import reference_program

            registry = ModelRegistry()
            registry.register(reference_program.NAME, reference_program)
            self._reference = export(registry.get(reference_program.NAME), Recipe(), self.settings.cache_dir)
        return self._reference

    @property
    def session_places(self) -> tuple[Place, ...]:
        """The folders every session writes into (checked before the first test)."""
        s = self.settings
        return (
            Place(
                "artifacts folder", s.session_dir.parent, option_and_ini("--sme2-artifacts-dir", "sme2_artifacts_dir")
            ),
            Place("export cache", s.cache_dir, option_and_ini("--sme2-cache-dir", "sme2_cache_dir")),
        )

    @property
    def places(self) -> tuple[Place, ...]:
        """Every folder this session may write into, each with the setting that moves it (for storage
        errors): the session's own, and the runner and emulator cache, used only where builds run."""
        from pytest_sme2.run.native.build import cache_root

        return (
            *self.session_places,
            Place("runner and emulator cache", cache_root(), "the PYTEST_SME2_RUNNER_CACHE environment variable"),
        )

    def test_dir(self, nodeid: str) -> Path:
        directory = self.settings.session_dir / slug(nodeid)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def close(self) -> None:
        if self._target is not None:
            self._target.close()


def link_artifact(source: Path, destination: Path, protect: bool = True) -> Path:
    """Put an export cache entry's ``.pte`` or ETRecord into a test's folder without copying its bytes.

    Why: a real model's program and ETRecord are tens to hundreds of MB, and every test of every session
    copied them (738 MB a session for a 2-layer SmolLM2). So the test's file is a hard link to the entry's
    where the file system allows (same file system), and a symbolic link to it otherwise: a reference, never a
    copy. Either is made under a fresh temp name and renamed over ``destination``, so whatever was there (an
    earlier program, a planted link) is replaced, never followed. A user who writes into such an artifact
    writes into the entry: the export cache checks every entry's files against their sha256 on every use, so
    the next session warns about the damaged entry and exports again; a changed program is never run as the
    cached one; the entry's file is made read-only first, so that (as anyone but root) such a write fails
    instead. An artifact already linked to the entry is left as it is. ``protect=False``: ``source`` is a file
    of the same session (the timed ETDump under the name the kit's tools glob) and keeps its mode.
    """
    source, destination = Path(source), Path(destination)
    try:
        if protect:
            source.chmod(source.stat().st_mode & ~0o222)
    except OSError:  # another user's shared cache: its owner decides
        pass
    try:
        if destination.exists() and os.path.samefile(source, destination):
            return destination
    except OSError:
        pass
    temporary = destination.with_name(f".{destination.name[:60]}.{secrets.token_hex(8)}.link")
    try:
        os.link(source, temporary)
    except OSError:  # another file system, or one without hard links
        os.symlink(source.resolve(), temporary)
    try:
        os.replace(temporary, destination)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return destination
