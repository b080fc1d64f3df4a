"""The regression gate as plain Python: judge one test's records against its stored baseline file.

The pytest hooks (``baseline_hooks.py``) gather a test's profiles, turn them into records and call
``check_file``; ``pytest-sme2 check SESSION_DIR`` calls the same function on the records a finished
session kept in its summary.json (``GATE_INPUT`` per test), so a verdict outside pytest is the
verdict inside it. Nothing here imports pytest.
"""

from __future__ import annotations

import json
import shlex
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Collection, Mapping

from pytest_sme2.errors import MissingBaselineWarning, UsageError
from pytest_sme2.gate import baseline_schema, baselines, findings
from pytest_sme2.gate.checks.modelled import device_option
from pytest_sme2.gate.judge import judge
from pytest_sme2.gate.quality import MAX_SUGGESTED_REPLICAS, baseline_quality, replicas_needed
from pytest_sme2.gate.record import READABLE_VERSIONS, RECORD_VERSION, GateRecord, upgraded
from pytest_sme2.gate.variant_change import missing_records_text
from pytest_sme2.gate.verdict import Status, Tolerances, Verdict
from pytest_sme2.run.targets.base import AUTO_REPLICAS, DEFAULT_TIMEOUT_S
from pytest_sme2.system.names import slug
from pytest_sme2.system.safe_files import write_file

MISSING_POLICIES = ("fail", "skip", "warn")
# What the gate judged, as a test report's user property and as the test's key in summary.json:
# the rules, the update command and each baseline file's records.
GATE_INPUT = "sme2_gate_input"
FAILED_HEADLINE = "sme2 baseline check failed:"


@dataclass(frozen=True)
class Rules:
    """How one test is judged: after ini, options and the test's @pytest.mark.baseline."""

    root: Path  # the baselines folder
    metric: str
    tolerances: Tolerances
    missing: str = "fail"
    update: bool = False
    accept_noisy: bool = False
    check_replicas: int | str = AUTO_REPLICAS  # replicas later checks measure (or "auto"): what a baseline must serve

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "metric": self.metric,
            "tolerances": asdict(self.tolerances),
            "missing": self.missing,
            "check_replicas": self.check_replicas,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], root: Path | None = None, missing: str | None = None) -> Rules:
        """The rules a session judged by (``as_dict``), optionally against another folder or missing policy."""
        try:
            return cls(
                root=Path(root or data["root"]),
                metric=str(data["metric"]),
                tolerances=Tolerances(**dict(data["tolerances"])),
                missing=missing or str(data["missing"]),
                check_replicas=data["check_replicas"]
                if data["check_replicas"] == AUTO_REPLICAS
                else int(data["check_replicas"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"the gate's rules in this summary are incomplete or damaged ({exc}); "
                "re-run the session to write them again"
            ) from None


def new_outcome() -> dict[str, Any]:
    """What one test's gate did, as plain data (a pytest user property, which crosses from xdist workers; read by
    the terminal summary and the reports): ``verdicts``, ``failed`` and ``notes`` hold ``Verdict.as_dict`` (read
    back with ``Verdict.from_dict``, rendered to text only where shown), the rest file paths and messages."""
    return {
        "paths": [],
        "written": [],
        "refused": [],
        # files judged against a stored baseline that held: every record paired, no verdict failed (the summary's
        # "N ok": a clean re-run's line once counted only what was written, refused, regressed or missing)
        "ok": [],
        "verdicts": [],
        "failed": [],
        "missing": [],
        "unused_labels": [],
        "fingerprints": [],
        "notes": [],
        # the failure's own lines per regressed baseline file, root cause first (what the terminal shows): the
        # reports and CI annotations show these, one block per file, not one line per moved quantity
        "findings": [],
        # written files that cannot gate everything the user may expect (changes under min_effect_ms pass, its
        # modelled time was dropped): their ``written`` lines, which the terminal shows
        "written_caveats": [],
        "unchanged": [],  # updated files whose every record equals the stored one: kept, date and commit too
        # baseline files an update did not write because the test's own body failed: "PATH: why", for the summary
        "not_written": [],
    }


def records_of(
    labelled: list[tuple[str, Any]], metric: str, inferences: int, device: Any = None
) -> dict[str, GateRecord]:
    """Each labelled Profile as the record a baseline keeps; with the instruction metric, callgrind counts a
    hardware run (an emulated run was counted by qemu already: its gate is that count whatever the metric, and
    callgrind's host counts in its place would be another machine's instructions); with a device model
    (``--sme2-device``), a counted run keeps its modelled time on it too."""
    records = {}
    for label, profile in labelled:
        instructions = None
        if metric == "instructions" and not profile.emulated:
            from pytest_sme2.run.callgrind import count_instructions

            pte = Path(profile.artifacts["pte"])
            inputs = profile.artifacts.get("inputs")
            count = count_instructions(
                pte,
                Path(inputs) if inputs else None,
                pte.parent / f"instructions-{slug(label)}",
                inferences=inferences,
                timeout_s=float(profile.metadata.get("run", {}).get("timeout_s", DEFAULT_TIMEOUT_S)),
            )
            instructions = count.as_dict()
        records[label] = baselines.record_of(profile, instructions, device)
    return records


def pair_records(records: Mapping[str, GateRecord], stored: Mapping[str, GateRecord]) -> dict[str, str]:
    """Which stored record each current profile is judged against.

    Same label first. A profile whose recipe changed (say partitioner xnnpack
    -> none) has a new label; if exactly one stored record of the same model
    and variant is left over, it is compared with that one, so the structural
    change is reported as regressions (with a recipe note) instead of as a
    missing baseline.
    """
    pairs = {label: label for label in records if label in stored}
    leftover = [label for label in stored if label not in pairs]
    for label, record in records.items():
        if label in pairs:
            continue
        same = [old for old in leftover if (stored[old].model, stored[old].variant) == (record.model, record.variant)]
        if len(same) == 1 and not any(other in pairs for other in same):
            pairs[label] = same[0]
            leftover.remove(same[0])
    return pairs


def assess_quality(
    records: dict[str, GateRecord],
    tolerances: Tolerances,
    accept_noisy: bool,
    check_replicas: int | str = AUTO_REPLICAS,
) -> list[str]:
    """Put each record's quality into it; the reasons to refuse the file (empty: write it).

    With ``check_replicas = "auto"`` each record is judged for the fewest check replicas that see 1.5
    tolerances of its every quantity (replicas_needed; refused when even the most do not), and
    its quality keeps that count for the checks (``auto_replicas``)."""
    refused = []
    for label, record in records.items():
        replicas = check_replicas
        if replicas == AUTO_REPLICAS:
            replicas = replicas_needed(record, tolerances) or MAX_SUGGESTED_REPLICAS
        quality, problems = baseline_quality(record, tolerances, int(replicas))
        if check_replicas == AUTO_REPLICAS and not record.emulated:  # counts need one: nothing to keep,
            quality["auto"] = True  # so a committed emulated baseline still changes only with its program
        if problems and accept_noisy:
            quality["accepted_despite"] = problems
        records[label] = replace(record, quality=quality)
        refused += [f"  {label}: {problem}" for problem in problems]
    return [] if accept_noisy else refused


def auto_replicas(root: Path, fingerprint: str, test_id: str, tolerances: Tolerances) -> int:
    """How many replicas ``sme2_replicas = auto`` measures a test's check in: the most any record of its
    stored baseline on this target needs, at most MAX_SUGGESTED_REPLICAS. A record written with
    auto keeps its count (``quality.check_replicas``); an older one is worked out from its replicas'
    spread with ``tolerances``. 1 without a readable baseline (the gate then says why)."""
    path = baselines.baseline_path(root, fingerprint, test_id)
    try:
        stored = baselines.load(path)
    except baselines.BaselineError:
        return 1
    if stored is None:
        return 1
    counts = []
    for record in stored.profiles.values():
        quality: Mapping[str, Any] = record.quality or {}
        kept = quality.get("check_replicas")
        if quality.get("auto") and isinstance(kept, int) and not isinstance(kept, bool) and kept >= 1:
            counts.append(kept)
        else:
            try:
                counts.append(replicas_needed(record, tolerances) or MAX_SUGGESTED_REPLICAS)
            except (KeyError, TypeError, ValueError):  # a record the gate will refuse by name
                counts.append(1)
    return min(max(counts, default=1), MAX_SUGGESTED_REPLICAS)


def write_verdicts(path: Path, ordered: list[findings.Finding], judged: list[Verdict]) -> Path:
    """Every verdict of one baseline file, findings first: the failing message stays short and names this file."""
    lines = ["findings, root cause first:"]
    lines += [f"  [{f.cause_name}] {f.line()}" for f in ordered] or ["  none"]
    lines += ["", f"every verdict ({len(judged)}):"] + [f"  {v}" for v in judged]
    write_file(path, "\n".join(lines) + "\n")
    return path


def verdicts_file_name(fingerprint: str) -> str:
    return f"baseline-verdicts~{slug(fingerprint, limit=40)}.txt"


@dataclass(frozen=True)
class GateFile:
    """One baseline file's worth of a test, what check_file writes or judges: the test, the target (its
    fingerprint names the file) and the records of the test's variants measured on it."""

    test_id: str
    fingerprint: str
    target: Mapping[str, Any]
    records: dict[str, GateRecord]


def check_file(
    file: GateFile,
    rules: Rules,
    update_command: str,
    outcome: dict[str, Any],
    verdicts_dir: Path | None = None,
    repo_root: Path | None = None,
) -> list[str]:
    """Write (``rules.update``) or judge one baseline file; return failure lines (empty if all is well).

    ``outcome`` (``new_outcome``) gathers what happened for the summary and reports; ``verdicts_dir``
    receives every verdict's line (None: not written); ``repo_root`` is where a written baseline's
    commit is read from.
    """
    path = baselines.baseline_path(rules.root, file.fingerprint, file.test_id)
    older = baselines.legacy_baseline_path(rules.root, file.fingerprint, file.test_id)
    # None: no file of this test under the name older versions gave it
    legacy = older if older != path and older.is_file() and baselines.stored_test_id(older) == file.test_id else None
    outcome["paths"].append(str(path))
    if rules.update:
        return _write_file(file, rules, path, legacy, outcome, repo_root)
    if legacy is not None and not path.exists():
        path = legacy  # recorded by an older pytest-sme2; the next update moves it
    return _judge_file(file, rules, path, update_command, outcome, verdicts_dir)


def _write_file(
    file: GateFile,
    rules: Rules,
    path: Path,
    legacy: Path | None,
    outcome: dict[str, Any],
    repo_root: Path | None,
) -> list[str]:
    """check_file with ``rules.update``: write the baseline file (moving a legacy-named one), unless another
    test owns it or the runs are not good enough; an unchanged file is kept as it is."""
    test_id, records = file.test_id, file.records
    owner = baselines.stored_test_id(path) if path.is_file() else None
    if owner is not None and owner != test_id:
        return [
            f"baseline not written to {path}: that file belongs to test {owner!r}; "
            f"move it away (it is never overwritten by another test's update)"
        ]
    refused = assess_quality(records, rules.tolerances, rules.accept_noisy, rules.check_replicas)
    if refused:
        outcome["refused"].append(str(path))
        return [
            f"baseline not written to {path}: the runs are not good enough to judge later runs by:",
            *refused,
            "ways out: run again on a quieter machine; more runs (--sme2-runs or "
            "@pytest.mark.perf(runs=...)) or replicas (--sme2-baseline-replicas, and --sme2-replicas for "
            "the checks that will use it); a tolerance the "
            "quantity can meet (@pytest.mark.baseline(latency=..., shares=...)); or, knowing the risk, "
            "write it anyway with --sme2-accept-noisy-baselines (the file then records the problems). "
            "Each of these is judged on this session's replicas only: on a busy or shared machine a later "
            "session's level can move further (docs/gate.md, 'Between sessions'); for a sub-millisecond "
            "model, instructions (--sme2-metric=instructions, or the emulated target) do not move at all",
        ]
    fresh = baselines.Baseline(path, test_id, file.fingerprint, records, dict(file.target))
    if legacy is None and _unchanged(path, fresh):
        outcome["unchanged"].append(str(path))  # a review of the update sees only files whose records moved
        return []
    dropped = _modelled_not_kept(legacy or path, records)
    try:
        baselines.write(replace(fresh, recorded=baselines.recorded_now(repo_root or Path.cwd())))
    except baselines.BaselineError:
        outcome["refused"].append(str(path))  # the summary's count says so too (a read-only file or folder)
        raise
    outcome["written"].append(str(path))
    _say_what_was_written(records, rules.tolerances, dropped, legacy, outcome)
    return []


def _say_what_was_written(
    records: Mapping[str, GateRecord],
    tol: Tolerances,
    dropped: str,
    legacy: Path | None,
    outcome: dict[str, Any],
) -> None:
    """Add to a just-written file's ``written`` line what its checks cost, what it cannot catch and where it was
    moved from (removing the legacy-named file); what it cannot do goes to ``written_caveats`` too."""
    if any((r.quality or {}).get("auto") for r in records.values()):  # time to judge: say what its checks cost
        needed = max(((r.quality or {}).get("check_replicas", 1) for r in records.values()), default=1)
        outcome["written"][-1] += f" (sme2_replicas = auto: its checks measure {needed} replica(s))"
    floor = _below_the_floor(records, tol)
    if floor:
        outcome["written"][-1] += f" ({floor})"
    if dropped:
        outcome["written"][-1] += f" ({dropped})"
    if legacy is not None:
        legacy.unlink()  # its record now lives under the collision-free name
        outcome["written"][-1] += f" (moved from {legacy.name})"
    if floor or dropped:  # what the written file cannot do: the terminal shows these lines
        outcome["written_caveats"].append(outcome["written"][-1])


def _judge_file(
    file: GateFile,
    rules: Rules,
    path: Path,
    update_command: str,
    outcome: dict[str, Any],
    verdicts_dir: Path | None,
) -> list[str]:
    """check_file without ``rules.update``: judge the records against the stored file's, gather the outcome and
    return the failure lines, missing records by ``rules.missing``, with the baseline block."""
    test_id, records = file.test_id, file.records
    stored = baselines.load(path)  # BaselineError names the file; the test fails, the file stays
    update_command = with_stored_device(update_command, stored)
    pairs = pair_records(records, stored.profiles) if stored is not None else {}
    absent = [label for label in records if label not in pairs]
    if stored is not None:
        if stored.test_id != test_id:
            raise baselines.BaselineError(
                f"baseline {path} belongs to test {stored.test_id!r}, not {test_id!r}; rename or remove it"
            )
        compared = set(pairs.values())
        outcome["unused_labels"] += [f"{path} :: {label}" for label in stored.profiles if label not in compared]
    judged: list[Verdict] = []
    for label, record in records.items():
        if label in pairs and stored is not None:  # pairs: none without a stored baseline
            judged += judge(label, record, stored.profiles[pairs[label]], rules.tolerances, rules.metric)
    ordered = findings.findings(judged)
    outcome["verdicts"] += [v.as_dict() for v in judged]
    outcome["failed"] += [v.as_dict() for f in ordered for v in f.verdicts if v.failed]  # root cause first
    outcome["notes"] += [v.as_dict() for f in ordered for v in f.verdicts if v.status == Status.NOTE]
    written = (
        write_verdicts(verdicts_dir / verdicts_file_name(file.fingerprint), ordered, judged)
        if judged and verdicts_dir is not None
        else None
    )
    failures: list[str] = findings.message_lines(ordered) if findings.failed(ordered) else []
    if failures and written is not None:
        failures.append(f"every verdict ({len(judged)}, root cause first): {written}")
    missing_text = ""
    if absent:
        shown = missing_records_text(absent, stored.profiles if stored is not None else ())
        missing_text = (
            f"no baseline for {shown} on target {file.fingerprint} in {path}; " f"record it with: {update_command}"
        )
        outcome["missing"].append(missing_text)
        if rules.missing == "fail":
            failures.append(missing_text)
        elif rules.missing == "warn":
            warnings.warn(MissingBaselineWarning(f"{test_id}: {missing_text}"))
    if failures:  # the baseline block: once per baseline file (one file holds every variant of the test)
        recorded = stored.recorded if stored is not None else {}
        when = f" ({baselines.recorded_text(recorded)})"
        failures.append(f"baseline: {path}{when if stored else ''}")
        if outcome["failed"]:  # a regression; a missing record already said how to record it
            failures.append(f"if the change is intended, update the baseline: {update_command}")
    failed = findings.failed(ordered)
    if stored is not None and not absent and not failed:
        outcome["ok"].append(str(path))
    if failed:
        outcome["findings"].append("\n".join(line for line in failures if line != missing_text))  # said apart
    return failures


def _below_the_floor(records: Mapping[str, GateRecord], tol: Tolerances) -> str:
    """What a just-written baseline cannot catch by time: variants whose runs are so short that a change of their
    latency tolerance is under min_effect_ms, below which latency and shares never fail (a CI owner's trial: a
    0.04 ms model's baseline was "written" with no word that a +40% change would pass). "" when none."""
    short = []
    for label, record in records.items():
        median = (record.latency or {}).get("median_ms") if not record.emulated else None
        if isinstance(median, (int, float)) and 0 < median * tol.latency <= tol.min_effect_ms:
            short.append(f"{label}: {median:.3g} ms, so changes under {tol.min_effect_ms / median:.0%} pass")
    if not short:
        return ""
    return (
        f"latency and shares are gated only above {tol.min_effect_ms:g} ms of change (min_effect_ms): "
        + "; ".join(short)
        + "; instructions (--sme2-metric=instructions or the emulated target) gate it exactly"
    )


def _unchanged(path: Path, fresh: baselines.Baseline) -> bool:
    """Whether the file at ``path`` holds exactly what an update would write, but for when and at which commit
    it was recorded (updating unchanged code rewrote the date and commit of every file, noise in
    the pull request's review). Exact counts repeat (emulated target); measured time never does."""
    try:
        text = baselines.read(path)
        stored = json.loads(text) if text is not None else None
    except (baselines.BaselineError, ValueError, RecursionError):
        return False
    wanted = json.loads(baselines.dumps(fresh.as_dict()))
    if not isinstance(stored, dict):
        return False
    # an update that models no device leaves a file whose counts did not move as it is, modelled time and all:
    # the same counts price to the same modelled time
    unpriced = {
        label
        for label, record in (wanted.get("profiles") or {}).items()
        if isinstance(record, dict) and "modelled" not in record
    }
    return _without_pointers(stored, unpriced) == _without_pointers(wanted)


def _device_options(stored: baselines.Baseline, labels: Collection[str] | None = None) -> list[str]:
    """The --sme2-device values (device_option) the stored baseline's records were modelled with, of the
    records named in ``labels`` (None: all)."""
    return sorted(
        {
            device_option(record.modelled)
            for label, record in stored.profiles.items()
            if record.modelled is not None and record.modelled.device and (labels is None or label in labels)
        }
    )


def with_stored_device(command: str, stored: baselines.Baseline | None) -> str:
    """The update command, with the --sme2-device its stored baseline was modelled on when the session named none:
    run as printed, an update without it drops the file's modelled time."""
    if stored is None or "--sme2-device" in command:
        return command
    options = _device_options(stored)
    return f"{command} --sme2-device={shlex.quote(options[0])}" if options else command


def _modelled_not_kept(path: Path, records: Mapping[str, GateRecord]) -> str:
    """What an update that models no device drops from the file it replaces: its modelled device time (a user's
    trial: the update command a failure printed had no --sme2-device, and running it removed every modelled
    block without a word). "" when nothing is dropped."""
    try:
        stored = baselines.load(path)
    except baselines.BaselineError:
        return ""
    if stored is None:
        return ""
    dropped = _device_options(stored, {label for label, record in records.items() if record.modelled is None})
    if not dropped:
        return ""
    return (
        f"{MODELLED_NOT_KEPT} on {' / '.join(dropped)}: this update modelled no device; record it again with "
        f"--sme2-device {shlex.quote(dropped[0])} to keep it"
    )


MODELLED_NOT_KEPT = "its modelled device time was not kept"


# Provenance that points at what changed (the model's file digests, its inputs' shapes) without being evidence: an
# edit that changes no count (a comment, a sibling model's file in the same package) must not rewrite a baseline,
# and baselines recorded before these were kept must not all be rewritten once.
PROVENANCE_POINTERS = ("model_files", "inputs")


def _without_pointers(data: dict[str, Any], unpriced: Collection[str] = ()) -> dict[str, Any]:
    """A baseline file's content as ``_unchanged`` compares it: no recording time, no provenance pointers, no
    --sme2-device spelling of its modelled time (the same device file named by another path prices the same, and
    must not rewrite every baseline: a review), and no modelled time at all for the records in ``unpriced``."""
    profiles = data.get("profiles")
    if isinstance(profiles, dict):
        profiles = {
            label: _record_without_pointers(record, label in unpriced) if isinstance(record, dict) else record
            for label, record in profiles.items()
        }
    return {**data, "recorded": None, "profiles": profiles}


def _record_without_pointers(record: dict[str, Any], unpriced: bool) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if not (unpriced and k == "modelled")}
    if isinstance(out.get("provenance"), dict):
        out["provenance"] = {k: v for k, v in out["provenance"].items() if k not in PROVENANCE_POINTERS}
    if isinstance(out.get("modelled"), dict):
        out["modelled"] = {k: v for k, v in out["modelled"].items() if k != "option"}
    return out


@dataclass
class CheckResult:
    """One test of a finished session judged again: its failure lines (empty: passed) and outcome."""

    test_id: str
    failures: list[str]
    outcome: dict[str, Any]

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def message(self) -> str:
        """The text the failing test showed in pytest."""
        return FAILED_HEADLINE + "\n" + "\n".join(self.failures)


BASELINES_DIR_OPTION = "--sme2-baselines-dir"


def update_into(command: str, baselines_dir: Path | None) -> str:
    """The session's update command, writing into ``baselines_dir`` when a check judged against that folder.

    Why: `check --baselines DIR` judges against DIR, so the update a failure advises must write there, not into
    the folder the session used (which the stored command names, or implies by leaving the option out).
    The folder is made absolute: the command may be run from another directory than the check."""
    if baselines_dir is None:
        return command
    prefix, _, rest = command.partition(" && ") if command.startswith("cd ") else ("", "", command)
    if prefix:  # "cd ROOTDIR && pytest ...": the session ran in a subfolder of its rootdir
        return f"{prefix} && {update_into(rest, baselines_dir)}"
    try:
        words = shlex.split(command)
    except ValueError:
        return command  # not a command line pytest-sme2 wrote; shown as stored
    kept, skip_next = [], False
    for word in words:
        if skip_next:
            skip_next = False
        elif word == BASELINES_DIR_OPTION:
            skip_next = True
        elif not word.startswith(BASELINES_DIR_OPTION + "="):
            kept.append(word)
    return shlex.join([*kept, f"{BASELINES_DIR_OPTION}={Path(baselines_dir).absolute()}"])


def current_gate_input(data: Mapping[str, Any]) -> dict[str, Any]:
    """One test's ``GATE_INPUT`` in this format's keys: a summary of an older pytest-sme2 (no
    ``record_version``: format 1) keeps its rules and records under their old names (record.upgraded)."""
    version = data.get("record_version", 1)
    version = version if version in READABLE_VERSIONS and not isinstance(version, bool) else RECORD_VERSION
    files = [
        {**entry, "records": {k: upgraded(r, version) for k, r in entry["records"].items()}}
        if isinstance(entry, Mapping) and isinstance(entry.get("records"), Mapping)
        else entry
        for entry in (data.get("files") or [])
    ]
    return {
        **data,
        "record_version": RECORD_VERSION,
        "rules": upgraded(data.get("rules") or {}, version, "rules"),
        **({"files": files} if "files" in data else {}),
    }


def gate_input_problem(data: Any, where: str) -> str | None:
    """What is wrong with one test's ``GATE_INPUT`` as read from a summary.json, or None: its records are checked
    as a baseline file's are (GateRecord.problem), so a NaN or infinite number there is refused by
    field, as in a baseline, rather than judged (a NaN planned_bytes would read as an improvement of +nan%,
    NaN latencies as inconclusive, both passing), and its text holds no control character."""
    if not isinstance(data, Mapping):
        return f"{where} must be an object"
    wrong = baseline_schema.control_character(dict(data), where)
    if wrong:
        return wrong
    files = data.get("files") or []
    if isinstance(files, list):
        files = current_gate_input(data).get("files") or []
    if not isinstance(files, list):
        return f"{where}.files must be a list"
    for j, entry in enumerate(files):
        records = entry.get("records") if isinstance(entry, Mapping) else None
        if not isinstance(records, Mapping):
            return f"{where}.files[{j}] must be an object with the records of one baseline file"
        for label, record in records.items():
            wrong = GateRecord.problem(record, f"{where}.files[{j}].records[{label!r}]")
            if wrong:
                return wrong
    return None


def check_session(
    tests: list[Mapping[str, Any]],
    baselines_dir: Path | None = None,
    missing: str | None = None,
    out_dir: Path | None = None,
) -> list[CheckResult]:
    """Judge every test of a session's summary.json (its ``GATE_INPUT``) against stored baselines.

    The same ``check_file`` as in pytest, with the rules the test was judged by; ``baselines_dir`` and
    ``missing`` replace the session's folder and missing policy. Every verdict of a test goes to
    ``out_dir/<its test folder>`` (None: not written). A summary whose tests carry no gate input is an
    error naming why, never a pass.
    """
    if missing is not None and missing not in MISSING_POLICIES:
        raise UsageError(f"--missing {missing!r}: choose one of {', '.join(MISSING_POLICIES)}")
    judged = [t for t in tests if isinstance(t.get(GATE_INPUT), Mapping)]
    if not judged:
        raise UsageError(
            "no test in this session was judged against baselines: its gate was off "
            "(--sme2-no-baselines, sme2_baselines = false, @pytest.mark.baseline(enabled=False)), it "
            "only wrote baselines (--sme2-update-baselines), or it was written by a pytest-sme2 before "
            "`check` existed; run the tests once with the gate on"
        )
    results = []
    for test in judged:
        data = current_gate_input(test[GATE_INPUT])
        rules = Rules.from_dict(data.get("rules") or {}, root=baselines_dir, missing=missing)
        test_id = str(data.get("test_id") or test.get("nodeid"))
        folder = None
        if out_dir is not None:
            folder = out_dir / Path(str(test.get("test_dir") or slug(test_id))).name
            folder.mkdir(parents=True, exist_ok=True)
        outcome = new_outcome()
        failures: list[str] = []
        for entry in data.get("files") or []:
            fingerprint = str(entry.get("fingerprint"))
            outcome["fingerprints"].append(fingerprint)
            records = {
                label: GateRecord.from_json(record) for label, record in dict(entry.get("records") or {}).items()
            }
            failures += check_file(
                GateFile(test_id, fingerprint, entry.get("target") or {}, records),
                rules,
                update_into(str(data.get("update_command")), baselines_dir),
                outcome,
                verdicts_dir=folder,
            )
        results.append(CheckResult(test_id, failures, outcome))
    return results
