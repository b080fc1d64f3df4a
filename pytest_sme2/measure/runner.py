"""Variants bound to a target, and turning their runs into Profiles.

A Runner is data (target + RunSpec) with the two things tests do with it:
``profile(pte)`` (ETDump on, the normal case) and ``time(pte)`` (timing only,
no ETDump, so tracing overhead can be measured against the ETDump runs).
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.errors import EtdumpError, KernelSamplingWarning, ProgramError, RunnerError, Sme2Error, UsageError
from pytest_sme2.evidence.etdump import read_run
from pytest_sme2.evidence.kernel_sampling import KernelNamer, KernelTime, attribute
from pytest_sme2.evidence.qemu_counts import InstructionTrace
from pytest_sme2.evidence.samplers import PERF_DATA, Sampler
from pytest_sme2.export.export import ExportedModel, tool_versions
from pytest_sme2.export.program import check_program
from pytest_sme2.export.work import ProgramFacts
from pytest_sme2.measure.count_estimate import CountHistory, estimate, known_macs
from pytest_sme2.measure.count_records import CountRecord, now_text, read_records, this_machine, write_record
from pytest_sme2.measure.session import Sme2Session, kit_variant, link_artifact
from pytest_sme2.model.registry import source_files
from pytest_sme2.profile import stats
from pytest_sme2.profile.profile import Profile
from pytest_sme2.profile.speedup import emulated_timing
from pytest_sme2.run.call_plan import PLAN_FILE, CallPlan
from pytest_sme2.run.device_state import Clock, DeviceState, cores_of_mask, wait_for_cooldown
from pytest_sme2.run.targets import RunResult, RunSpec
from pytest_sme2.run.targets.base import RUN_FACTS, VERSION_KEYS
from pytest_sme2.system.deprecated import warn_renamed
from pytest_sme2.system.digests import file_sha256
from pytest_sme2.system.names import slug
from pytest_sme2.system.safe_files import write_file
from pytest_sme2.system.side_by_side import side_by_side

_CALLS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Timings:
    """Per-run wall-clock latencies of a timing-only run (no ETDump)."""

    wall_ms: np.ndarray
    label: str
    result: RunResult

    @property
    def latency(self) -> stats.SampleStats:
        """Wall-clock statistics; on the emulated target a timing skip, as Profile.latency (emulator time)."""
        if self.result.target.emulated:
            raise emulated_timing(f"latency of {self.label} not read")
        return stats.SampleStats.of(self.wall_ms)

    def tracing_overhead(self, profile: Profile) -> stats.Interval:
        """How much slower per run the ETDump run was: median ratio - 1, with a CI."""
        if profile.wall_ms is None:
            raise ValueError(f"{profile!r} has no wall-clock samples to compare")
        ratio = stats.ratio_of_medians_ci(profile.wall_ms, self.wall_ms)
        return stats.Interval(ratio.value - 1, ratio.low - 1, ratio.high - 1, ratio.confidence)

    def __repr__(self) -> str:
        if self.result.target.emulated:
            return f"Timings({self.label}: emulated, {len(self.wall_ms)} runs; emulator time is not latency)"
        return f"Timings({self.label}: median {float(np.median(self.wall_ms)):.3f} ms over {len(self.wall_ms)} runs)"


@dataclass
class Runner:
    """One variant on one target. Created by the ``runner`` fixture."""

    session: Sme2Session
    spec: RunSpec
    test_dir: Path
    test_id: str = ""
    _calls: list[int] = field(default_factory=lambda: [0])
    # What each process calls (call_plan.py), when not the export's example inputs once per run: a language
    # model's prefill, or its decode steps after a prefill (llm.py); ``phase`` names it in the variant's label,
    # so each phase has its own baseline.
    plan: CallPlan | None = None
    phase: str = ""

    @property
    def replicas(self) -> int:
        """Processes one measurement of this variant takes: ``spec.replicas``, but one on the emulated target,
        whose counted runs repeat exactly."""
        return 1 if self.session.target.info.emulated else self.spec.replicas

    @property
    def label(self) -> str:
        """The variant's name: target kind, SME2 setting, threads. No device serial ("adb", not
        "adb:SERIAL"), so a baseline recorded on one phone serves every phone with the same
        fingerprint (model, SoC); the serial stays in the profile's target metadata."""
        kind = self.session.target.info.name.split(":")[0]
        phase = f" {self.phase}" if self.phase else ""
        return f"{kind} {self.spec.sme2_label} threads={self.spec.threads}{phase}"

    def _run(
        self, pte: "ExportedModel | str | Path", etdump: bool, sampler: "Sampler | None" = None
    ) -> tuple[RunResult, dict[str, Any]]:
        with _CALLS_LOCK:  # two sides made at once (side_by_side.py) each take their own number
            self._calls[0] += 1
            number = self._calls[0]
        spec = replace(self.spec, etdump=etdump)
        kind = "kernels" if sampler is not None else "profile" if etdump else "timing"
        # sme2_on / sme2_off in folder names: how the reference kit's tools tell the two apart
        out_dir = self.test_dir / f"{number:02d}-{kind}-{slug(kit_variant(self.label))}"
        if isinstance(pte, ExportedModel):
            program = check_program(link_artifact(pte.path, self.test_dir / f"{slug(pte.label)}.pte"))
            etrecord = None
            if pte.etrecord_path.exists():
                etrecord = link_artifact(pte.etrecord_path, self.test_dir / f"{slug(pte.label)}.etrecord")
            inputs = pte.inputs_path
            identity: dict[str, Any] = {
                "model": pte.model,
                "recipe": pte.recipe.label,
                "delegation": pte.delegation,
                "etrecord": str(etrecord) if etrecord else None,
                "export": self._provenance(pte),
            }
        else:
            program = check_program(Path(pte))  # a missing or truncated file is named before it is read
            inputs = None
            identity = {
                "model": program.stem,
                "recipe": "external",
                "delegation": None,
                "etrecord": None,
                "export": {"pte_sha256": file_sha256(program), **tool_versions()},
            }
        if self.plan is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            inputs = self.plan.save(out_dir / PLAN_FILE)
        identity["pte"] = str(program)
        identity["inputs"] = str(inputs) if inputs is not None else None
        reference = self.session.reference() if sampler is None else None  # a sampled process is not timed
        before = self._state_before() if sampler is None else None
        # a target written before Target.counts_instructions (a user's, a test's double) counts nothing
        counts = getattr(self.session.target, "counts_instructions", None)
        counted = bool(counts is not None and counts(spec))
        started = time.perf_counter()
        extra: dict[str, Any] = {"sampler": sampler} if sampler is not None else {}
        if counted:  # said and judged where the target emulates: a run the result cache answers costs nothing
            extra["before_counting"] = lambda: self._expect(pte, program, identity, spec)
        result = self.session.target.run(
            program, inputs, spec, out_dir, reference=reference.path if reference is not None else None, **extra
        )
        if counted:
            self._remember(result, identity, spec)
        if before is not None:
            identity["device_state"] = self._state_record(before)
        # How long the target took (runs, reference runs, process start): what the plugin's own cost is
        # measured against (benchmarks/bench_plugin_overhead.py).
        identity["run_seconds"] = time.perf_counter() - started
        write_file(
            out_dir / RUN_FACTS,
            json.dumps(
                {
                    "version": 1,
                    "target": self.session.target.info.as_dict(),
                    "spec": spec.as_dict(),
                    # what made the program: `pytest-sme2 compare` shows two runs' versions side by side (issue 66)
                    "versions": {k: identity["export"].get(k) for k in VERSION_KEYS if k in identity["export"]},
                },
                indent=1,
                default=str,
            ),
        )
        return result, identity

    def _records(self) -> list[CountRecord]:
        """The cache's counted-run records, read once per process; a skipped one is said, never fatal."""
        if self.session.count_records is None:
            records, skipped = read_records(self.session.settings.cache_dir)
            for sentence in skipped:
                self.session.say(f"sme2: {sentence}")
            self.session.count_records = records
        return self.session.count_records

    def _expect(
        self, pte: "ExportedModel | str | Path", program: Path, identity: dict[str, Any], spec: RunSpec
    ) -> None:
        """Before a counted run: say what it is expected to cost (count_estimate.py), keep the typical count for
        the progress line, and refuse a run that cannot finish inside its timeout, before it starts."""
        records = self._records()
        same = [
            r for r in records if (r.model, r.recipe, r.variant) == (identity["model"], identity["recipe"], self.label)
        ]
        expected = estimate(
            self._facts(pte, str(program)).work,
            program.stat().st_size,
            identity["recipe"],
            spec.sme2 is not False,
            spec.warmup + spec.runs,
            CountHistory(same[0] if same else None, records, this_machine()),
        )
        # the progress line's "of about N" (plugin/progress.py), by the SME2 setting its reports name: in the
        # session, since compare_variants runs copies of this runner side by side
        self.session.expected_instructions[spec.sme2_label] = expected.instructions[1]
        self.session.say(f"sme2: {identity['model']} [{self.label}]: {expected.line()}")
        refusal = expected.refusal(spec.timeout_s, spec.timeout_source or f"--sme2-timeout={spec.timeout_s:g}")
        if refusal is not None:
            raise UsageError(f"{identity['model']} [{self.label}]: {refusal}")
        warning = expected.warning(spec.timeout_s)
        if warning is not None:
            self.session.say(f"sme2: {identity['model']} [{self.label}]: {warning}")

    def _remember(self, result: RunResult, identity: dict[str, Any], spec: RunSpec) -> None:
        """After a counted run the emulator did (not the result cache): its record, for the next estimate."""
        counted = result.evidence.get("counted_run")
        if not isinstance(counted, dict) or (result.evidence.get("result_cache") or {}).get("cached"):
            return
        facts = self.session.program_facts.get(identity["pte"])
        record = CountRecord(
            model=str(identity["model"]),
            recipe=str(identity["recipe"]),
            variant=self.label,
            sme2=spec.sme2 is not False,
            instructions=int(counted["instructions"]),
            inferences=spec.warmup + spec.runs,
            macs=known_macs(facts.work) if facts is not None else 0.0,
            seconds=float(counted["seconds"]),
            machine=this_machine(),
            recorded=now_text(),
        )
        try:
            write_record(self.session.settings.cache_dir, record)
        except (OSError, Sme2Error) as exc:  # a read-only or full cache: the next estimate is modelled instead
            self.session.say(f"sme2: the counted-run record of {record.model} was not written: {exc}")
            return
        records = self._records()
        records[:] = [record] + [
            r for r in records if (r.model, r.recipe, r.variant) != (record.model, record.recipe, record.variant)
        ]

    def _state_before(self) -> "dict[str, Any] | None":
        """The device's state before a chunk (None: the target reads none), after waiting for it to cool
        down when the session asks (--sme2-cooldown-temp). The session's first reading is its steady state."""
        target, settings = self.session.target, self.session.settings
        state = target.device_state()
        if state is None:
            return None
        waited, still_hot = 0.0, None
        if settings.cooldown_c is not None:
            state, waited, still_hot = wait_for_cooldown(
                self._read_state,
                settings.cooldown_c,
                settings.cooldown_max_s,
                self.session.say,
                Clock(time.sleep, time.monotonic),
                first=state,
            )
        if self.session.steady_state is None:
            self.session.steady_state = state
        return {"state": state, "cooldown_s": waited, "still_hot": still_hot}

    def _read_state(self) -> DeviceState:
        """The device's state, from a target that has read one before (``_state_before``)."""
        state = self.session.target.device_state()
        if state is None:
            raise RunnerError(
                f"the {self.session.target.info.name} target read the device's state once and then no more; "
                "its device_state() must answer every time or never"
            )
        return state

    def _state_record(self, before: dict[str, Any]) -> dict[str, Any]:
        """Before and after the round, and why it counts as throttled (None: it does not)."""
        after = self._read_state()
        steady = self.session.steady_state
        cores = cores_of_mask(self.session.target.info.details.get("affinity"))  # the cores the runner may use
        reasons = [r for r in (before["state"].throttling(steady, cores), after.throttling(steady, cores)) if r]
        return {
            "before": before["state"].as_dict(),
            "after": after.as_dict(),
            "cooldown_s": before["cooldown_s"],
            "still_hot_after_cooldown": before["still_hot"],
            "throttled": "; ".join(dict.fromkeys(reasons)) or None,
            "governor": after.governor(cores),
        }

    def profile(
        self, pte: "ExportedModel | str | Path", extra_rounds: bool = True, *, top_up: bool | None = None
    ) -> Profile:
        """Run with ETDump and build the Profile of the timed runs.

        When the machine disturbed so many runs that fewer than half of them
        are undisturbed (for 20 runs or more: clean_runs_wanted), the same number of runs
        is made again in an extra round, up to ``spec.max_rounds`` rounds in all, and the rounds are
        merged: on a busy machine the run count grows until a verdict has enough undisturbed
        runs to stand on, and on a quiet one it costs nothing. ``extra_rounds=False`` makes one round
        only (and no sampled runner process): compare_variants makes its own rounds. ``top_up`` is
        its earlier spelling (system/deprecated.py).

        With ``spec.replicas`` > 1 (a baseline update) the whole measurement is made that many
        times, each replica begun in a fresh process, so the baseline knows how far its quantities move
        between replicas (stats.ReplicaShift). Counted (emulated) runs repeat exactly: one is enough.
        """
        if top_up is not None:
            warn_renamed("Runner.profile(top_up=)")
            extra_rounds = top_up
        replicas = self.replicas
        if replicas == 1:
            profile = replace(self, spec=replace(self.spec, replicas=1))._one_replica(pte, extra_rounds)
        else:
            fresh = replace(self, spec=replace(self.spec, fresh_process=True))
            profile = Profile.concat([fresh._one_replica(pte, extra_rounds) for _ in range(replicas)], replicas=True)
        return self.with_kernel_time(profile, pte) if extra_rounds else profile

    def _one_replica(self, pte: "ExportedModel | str | Path", extra_rounds: bool) -> Profile:
        """One replica: a round of the runs asked for, and extra rounds (``extra_rounds``) without asking for a
        fresh process while the machine disturbed too many of them."""
        rounds = [self._profile_once(pte)]
        profile = rounds[0]
        same = replace(self, spec=replace(self.spec, fresh_process=False))
        while (
            extra_rounds
            and len(rounds) < self.spec.max_rounds
            and not profile.emulated
            and int(profile.clean_relative.sum()) < clean_runs_wanted(self.spec.runs)
        ):
            rounds.append(same._profile_once(pte))
            profile = Profile.concat(rounds)
        return profile

    def with_kernel_time(self, profile: Profile, pte: "ExportedModel | str | Path") -> Profile:
        """``profile`` with the kernels that took each operator's time, when the session samples kernels.

        One more runner process under the sampler (a sampled process), never the timed runs (kernel_sampling.py). A
        sampler that is missing, not permitted or fails leaves the profile without
        attribution (``kernel_time.problem`` says why, and a warning) rather than failing the test.
        """
        settings = self.session.settings.kernel_sampling
        if settings is None:
            return profile
        try:
            sampler = self.session.target.kernel_sampler(settings.period_ns)
        except Sme2Error as exc:
            return self._without_kernel_time(profile, str(exc), "")
        try:
            result, _ = self._run(pte, etdump=True, sampler=sampler)
            if result.clock_offset_ns is None:
                raise RunnerError(
                    f"the runner ({result.log}) did not report 'clock_offset_ns', which places samples "
                    "in ETDump events; rebuild it with `pytest-sme2 build-runner`"
                )
            trace = read_run(_timed_etdump(result))
            kernel_time = attribute(
                sampler.samples(result.out_dir),
                trace,
                result.clock_offset_ns,
                KernelNamer(settings.symfs, sampler.library_copies),
                settings.period_ns,
                sampler.description,
            )
        except (Sme2Error, OSError, ValueError) as exc:
            return self._without_kernel_time(profile, f"the sampled process failed: {exc}", sampler.description)
        kernel_time.artifacts = {
            "samples": str(result.out_dir / PERF_DATA),
            "etdump": str(result.timed_etdump),
            "log": str(result.log),
        }
        profile.kernel_time = kernel_time
        return profile

    def _without_kernel_time(self, profile: Profile, problem: str, sampler: str) -> Profile:
        warnings.warn(
            KernelSamplingWarning(
                f"{self.test_id or profile.label}: no kernel time for " f"{profile.label}: {problem}"
            ),
            stacklevel=3,
        )
        profile.kernel_time = KernelTime.unavailable(problem, sampler)
        return profile

    def _profile_once(self, pte: "ExportedModel | str | Path") -> Profile:
        result, identity = self._run(pte, etdump=True)
        if result.timed_etdump is None:
            raise EtdumpError(f"the runner did not report an ETDump for {result.out_dir}; see {result.log}")
        facts = self._facts(pte, identity["pte"])
        memory = dict(result.evidence.get("memory") or {})
        if not memory.get("planned_buffers"):  # a runtime that does not report it (the Python binding)
            memory["planned_buffers"] = facts.planned_buffers
        metadata = {
            "target": result.target.as_dict(),
            "run": self.spec.as_dict(),
            "sme2_active": result.sme2_active,
            "runtime_threads": result.runtime_threads,
            "test": self.test_id,
            "export": identity["export"],
            "run_seconds": identity["run_seconds"],
            **result.evidence,
            "memory": memory,
        }
        if "device_state" in identity:
            metadata["device_state"] = identity["device_state"]
        try:
            return self._profile_of(result, identity, facts, metadata)
        except EtdumpError as exc:  # a file the runner wrote: the runner (or its ETDump writer) is at fault
            if not (result.timed_etdump.is_file() and result.timed_etdump.stat().st_size):
                raise  # missing or empty: the reader's message already points at the runner's log
            raise EtdumpError(
                f"{exc}. The runner wrote it in this run, so the runner is broken or from another "
                f"ExecuTorch version than this pytest-sme2 reads; its log: {result.log}"
            ) from None

    def _profile_of(
        self, result: RunResult, identity: dict[str, Any], facts: ProgramFacts, metadata: dict[str, Any]
    ) -> Profile:
        return Profile.from_etdump(
            _timed_etdump(result),
            result.warmup_etdump,
            model=identity["model"],
            recipe=identity["recipe"],
            variant=self.label,
            delegation=identity["delegation"],
            wall_ms=result.wall_ms,
            reference_ms=result.reference_ms,
            reference_load_ms=result.reference_load_ms,
            throttled=bool((metadata.get("device_state") or {}).get("throttled")),
            metadata=metadata,
            instructions=_counted(result),
            work=facts.work,
            artifacts=result.artifacts
            | {"pte": identity["pte"]}
            | ({"inputs": identity["inputs"]} if identity["inputs"] else {})
            | ({"etrecord": identity["etrecord"]} if identity["etrecord"] else {}),
        )

    def _facts(self, pte: "ExportedModel | str | Path", program: str) -> ProgramFacts:
        """Planned memory and per-operator work of the program: from its export cache entry when it has one
        (written at export), else read from the .pte once per session."""
        cache = self.session.program_facts
        if program not in cache:
            cache[program] = ProgramFacts.of(program, pte.directory if isinstance(pte, ExportedModel) else None)
        return cache[program]

    def _provenance(self, pte: ExportedModel) -> dict[str, Any]:
        """What produced this program (for baselines): recipe, export key, versions, and under
        ``model_source_hash`` the digest of the traced model (code of every module it uses, weights, input
        values; export_key.program_digest), so that a baseline notes "the model's traced program changed" exactly
        when the program the model traces to did; with it the digests of the model's own files and its inputs'
        shapes, so the note can name what changed."""
        pointers = self.session.provenance_pointers
        if pte.cache_key not in pointers:  # read once per export and session, not once per run of it
            try:
                files = source_files(self.session.registry.get(pte.model))
            except Sme2Error:  # a program exported elsewhere under a name this session does not know: no pointer
                files = {}
            pointers[pte.cache_key] = {"model_files": files, "inputs": input_signature(pte.inputs_path)}
        return {
            "model_source_hash": pte.program_digest,
            "recipe": asdict(pte.recipe),
            "cache_key": pte.cache_key,
            **pointers[pte.cache_key],
            **tool_versions(),
        }

    def time(self, pte: "ExportedModel | str | Path") -> Timings:
        """Run without ETDump: wall-clock latencies only."""
        result, _ = self._run(pte, etdump=False)
        return Timings(result.wall_ms, self.label, result)


def input_signature(path: Path | None) -> list[str]:
    """Each example input's shape and dtype ("1x3x32x32 float32"), from the export's inputs file: what a baseline's
    provenance note names when the inputs changed (their values are in the program digest)."""
    if path is None or not Path(path).is_file():
        return []
    import torch

    try:
        inputs = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - a note, not a check: the export cache checks its own files
        return []
    return [
        "x".join(str(n) for n in t.shape) + " " + str(t.dtype).removeprefix("torch.")
        if isinstance(t, torch.Tensor)
        else type(t).__name__
        for t in inputs
    ]


def _counted(result: RunResult) -> InstructionTrace | None:
    """The run's events in instructions, when the target counted them (the emulated target)."""
    counts = result.evidence.get("instruction_counts")
    if counts is None or result.timed_etdump is None:
        return None
    return InstructionTrace.from_counts(Path(counts), result.timed_etdump, result.warmup_etdump)


def clean_runs_wanted(runs: int) -> int:
    """Undisturbed runs a variant should have before its Profile is used: at least half the requested runs.

    Fewer than 2 x stats.MIN_CLEAN_RUNS runs is a quick look that no verdict needs to stand on: taken as it is.
    """
    return -(-runs // 2) if runs >= 2 * stats.MIN_CLEAN_RUNS else 0


def alternate(
    pte: "ExportedModel | str | Path", first: Runner, second: Runner, rounds: int = 4
) -> tuple[Profile, Profile]:
    """Profile two variants in alternating chunks (A, B, A, B, ...) and merge each variant's chunks.

    On a shared machine the speed of the whole box drifts over seconds; running
    one variant after the other puts the drift into the comparison. Alternating
    chunks spreads it over both. Each variant's runs are split into ``rounds``
    chunks (separate processes, each with its own warmup), so the merged profile
    has the variant's usual number of timed runs. With ``spec.replicas`` > 1 (a baseline
    update) the whole alternating measurement is made that many times, each starting in a
    fresh process, and kept as replicas (Runner.profile).
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise UsageError(f"rounds={rounds!r} is invalid: use an integer >= 1")
    replicas = max(first.replicas, second.replicas)
    once = [replace(r, spec=replace(r.spec, replicas=1)) for r in (first, second)]
    if replicas == 1:
        merged = _alternate_once(pte, once[0], once[1], rounds, fresh=False)
    else:
        parts = [_alternate_once(pte, once[0], once[1], rounds, fresh=True) for _ in range(replicas)]
        merged = (
            Profile.concat([part[0] for part in parts], replicas=True),
            Profile.concat([part[1] for part in parts], replicas=True),
        )
    return first.with_kernel_time(merged[0], pte), second.with_kernel_time(merged[1], pte)


def _alternate_once(
    pte: "ExportedModel | str | Path", first: Runner, second: Runner, rounds: int, fresh: bool
) -> tuple[Profile, Profile]:
    """One alternating measurement of both variants; ``fresh``: its first chunk starts a fresh process."""
    chunks: tuple[list[Profile], list[Profile]] = ([], [])
    plans = []
    for runner in (first, second):
        count = min(rounds, runner.spec.runs)
        sizes = [runner.spec.runs // count + (1 if i < runner.spec.runs % count else 0) for i in range(count)]
        plans.append(sizes + [0] * (rounds - count))

    # A target whose runs do not disturb each other (counted instructions) makes both sides at once.
    at_once = first.session.target.side_by_side

    def one_round(round_index: int) -> None:
        calls: list[tuple[int, Runner]] = []
        for side, runner in enumerate((first, second)):
            runs = plans[side][round_index % rounds]
            if runs:
                starts = fresh and not chunks[0] and not chunks[1] and not calls
                calls.append((side, replace(runner, spec=replace(runner.spec, runs=runs, fresh_process=starts))))
        made = side_by_side([partial(chunk.profile, pte, extra_rounds=False) for _, chunk in calls], at_once)
        for (side, _), profile in zip(calls, made):
            chunks[side].append(profile)

    for round_index in range(rounds):
        one_round(round_index)
    merged = Profile.concat(chunks[0]), Profile.concat(chunks[1])
    # Too many disturbed runs on either side: more alternating rounds, up to max_rounds times the runs asked for.
    extra = 0
    while (
        extra < (max(first.spec.max_rounds, second.spec.max_rounds) - 1) * rounds
        and not merged[0].emulated
        and any(int(p.clean_relative.sum()) < clean_runs_wanted(r.spec.runs) for p, r in zip(merged, (first, second)))
    ):
        one_round(extra)
        extra += 1
        merged = Profile.concat(chunks[0]), Profile.concat(chunks[1])
    return merged


def require_program(pte: object) -> None:
    if not isinstance(pte, (ExportedModel, str, Path)):
        raise ProgramError(
            f"etdump_profile() needs the exported_pte fixture's value or a .pte path, got {type(pte).__name__}"
        )


def _timed_etdump(result: RunResult) -> Path:
    """The timed runs' ETDump of a run that asked for one: a target that wrote none is named, not read as None."""
    if result.timed_etdump is None:
        raise RunnerError(f"the runner ({result.log}) wrote no ETDump of its timed runs, though one was asked for")
    return result.timed_etdump
