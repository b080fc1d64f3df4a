"""The baseline store: one human-diffable JSON file per (target fingerprint, test id).

Layout: ``<baselines dir>/<target fingerprint>/<test id slug>.json``. A file
holds one record per profile the test built, keyed by the profile's label
(model, recipe and variant), so a test that compares SME2 on and off keeps
both in one file and a review shows what changed in one place.

Why one file per test: pytest-xdist runs a test on one worker, so concurrent
updates never write the same file; each write goes to a temporary file in
the same folder and is renamed over the old one (``os.replace``), so a reader
sees the old or the new baseline, never half of one.

Formatting is stable (sorted keys, two-space indent, numbers rounded to six
significant digits, number lists on one line) so a baseline update reads
well in code review. A file that cannot be read is a :class:`BaselineError`
naming the file; nothing but an explicit update ever overwrites it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_sme2.errors import BaselineError, UsageError
from pytest_sme2.evidence.etdump import op_id
from pytest_sme2.gate import baseline_schema
from pytest_sme2.gate.record import READABLE_VERSIONS, RECORD_VERSION, Counts, GateRecord, Modelled, upgraded
from pytest_sme2.system.names import clean, slug
from pytest_sme2.system.plain_text import one_line
from pytest_sme2.system.regular_files import BASELINE, RefusedFile, read_text
from pytest_sme2.system.writable_folders import read_only_mode

SCHEMA_VERSION = RECORD_VERSION  # the file's format is its records' (gate/record.py)
SUFFIX = ".json"
_NAME_LIMIT = 100
_SIGNIFICANT = 6
_NUMBER = r"(?:-?[0-9][-+0-9.eE]*|null)"
_NUMBER_LIST = re.compile(rf"\[\s*({_NUMBER}(?:,\s*{_NUMBER})*)\s*\]")
# Target facts that identify it; details such as runner paths change between checkouts and stay out.
_TARGET_KEYS = ("name", "cpu", "arch", "has_sme2", "emulated", "fingerprint")


def baseline_path(root: Path, fingerprint: str, test_id: str) -> Path:
    """Where the baseline of ``test_id`` on the target ``fingerprint`` lives (one file per test id:
    names.slug gives distinct ids distinct names)."""
    return Path(root) / slug(fingerprint) / f"{slug(test_id, limit=_NAME_LIMIT)}{SUFFIX}"


def legacy_baseline_path(root: Path, fingerprint: str, test_id: str) -> Path:
    """Where pytest-sme2 before collision-free names put the file (``a/b`` and ``a_b`` shared it).

    Read when the file is not at its new place and belongs to this test; an update moves it.
    """
    name = clean(test_id) or "unnamed"
    if len(name) > _NAME_LIMIT:
        name = f"{name[:_NAME_LIMIT]}-{hashlib.sha256(test_id.encode()).hexdigest()[:10]}"
    return Path(root) / slug(fingerprint) / f"{name}{SUFFIX}"


def _rounded(value: Any) -> Any:
    """Numbers to six significant digits (diffs show real changes, not float noise)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return float(f"{value:.{_SIGNIFICANT}g}")
    if isinstance(value, Mapping):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _rounded(value.item())
    if hasattr(value, "tolist"):  # numpy arrays
        return _rounded(value.tolist())
    raise TypeError(f"cannot store {type(value).__name__} in a baseline")


def dumps(data: Mapping[str, Any]) -> str:
    """The canonical text of a baseline: sorted keys, indent 2, number lists on one line, final newline."""
    text = json.dumps(_rounded(data), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(p.strip() for p in m.group(1).split(",")) + "]", text) + "\n"


def record_of(profile: Any, instructions: Mapping[str, Any] | None = None, device: Any = None) -> GateRecord:
    """What a baseline keeps of one Profile (``GateRecord.of``: everything a verdict compares, and where it came
    from). ``instructions``: callgrind's counts of the host run, when the gate counted them. ``device``: a
    DeviceModel (``--sme2-device``) whose modelled time of a counted run is kept too (modelled_record)."""
    record = GateRecord.of(profile)
    if instructions is not None:
        return replace(record, instructions=Counts.from_json({"source": "callgrind (host)", **dict(instructions)}))
    if record.instructions is not None and device is not None:  # the emulated target's counted run
        return replace(record, modelled=Modelled.from_json(modelled_record(profile, device)))
    return record


def modelled_record(profile: Any, device: Any) -> dict[str, Any]:
    """A counted run's modelled time on ``device`` as a baseline keeps it: end to end, per category and per
    operator (keyed like the counted ``instructions.ops``, so the gate pairs them the same way), with the
    device's name and pricing digest (only times priced by the same numbers are compared). A profile the
    model refuses (another vector length, threads > 1) keeps the reason instead of a number."""
    kept: dict[str, Any] = {
        "device": device.name,
        "option": device.option,
        "pricing_digest": device.pricing_digest,
        "validation": device.validation,
    }
    try:
        modelled = profile.modelled(device)
    except UsageError as exc:
        return {**kept, "refused": str(exc)}
    ops = {op_id(key): float(ms) for key, ms in zip(profile.trace.ops, modelled.ops["modelled_ms"])}
    return {**kept, "e2e_ms": modelled.e2e_ms, "category_ms": modelled.category_ms, "ops": ops}


def git_commit(directory: Path) -> str | None:
    """The commit checked out in ``directory`` (None outside a git work tree)."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


@dataclass
class Baseline:
    """One stored baseline file."""

    path: Path
    test_id: str
    fingerprint: str
    profiles: dict[str, GateRecord]
    target: dict[str, Any] = field(default_factory=dict)
    recorded: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "test": self.test_id,
            "fingerprint": self.fingerprint,
            "target": {k: self.target[k] for k in _TARGET_KEYS if k in self.target},
            "recorded": self.recorded,
            "profiles": {label: record.to_json() for label, record in self.profiles.items()},
        }


def _broken(path: Path, why: str) -> BaselineError:
    return BaselineError(
        f"baseline {path} cannot be used: {why}. Fix it by hand (e.g. `git checkout -- {path}`) or record it "
        "again with --sme2-update-baselines; pytest-sme2 never overwrites it otherwise"
    )


def read(path: Path) -> str | None:
    """The text of the baseline file at ``path`` through the one reader (system/regular_files.py): None if there
    is none; BaselineError naming the file when it is a FIFO, a device, a link out of the baselines folder
    (``<root>/<fingerprint>/<file>``: a pull request can commit a link to /dev/zero) or larger than a baseline can
    be, before a byte of it is read."""
    path = Path(path)
    try:
        return read_text(path, BASELINE, within=path.parent.parent)
    except FileNotFoundError:
        return None
    except RefusedFile as refused:
        raise _broken(path, f"it {refused.reason}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _broken(path, f"cannot read it ({exc})") from None


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``; None if there is none; BaselineError if the file is broken."""
    path = Path(path)
    text = read(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _broken(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # "[[[[...": a damaged file, not a bug
        raise _broken(path, "nested too deeply to be a baseline file") from None
    if not isinstance(data, dict):
        raise _broken(path, "the top level is not a JSON object")
    wrong = baseline_schema.control_character(data)
    if wrong:
        raise _broken(path, wrong)
    schema = data.get("schema")
    if schema not in READABLE_VERSIONS or isinstance(schema, bool):
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise _broken(path, f"schema {schema!r}, this pytest-sme2 reads schemas {readable}")
    missing = [k for k in ("test", "fingerprint", "profiles") if k not in data]
    if missing:
        raise _broken(path, f"missing key(s) {', '.join(missing)}")
    profiles = data["profiles"]
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise _broken(path, "'profiles' is not an object of profile records")
    profiles = {label: upgraded(record, schema) for label, record in profiles.items()}  # an older format's keys
    for key, kind in (("test", str), ("fingerprint", str), ("target", dict), ("recorded", dict)):
        if (
            key in data
            and not isinstance(data[key], kind)
            and not (key in ("target", "recorded") and data[key] is None)
        ):
            raise _broken(
                path,
                f"{key!r} must be {'a string' if kind is str else 'an object'} " f"(it is {type(data[key]).__name__})",
            )
    wrong = baseline_schema.problem(data.get("recorded"), baseline_schema.RECORDED, "recorded")
    if wrong:
        raise _broken(path, wrong)
    for label, record in profiles.items():
        wrong = GateRecord.problem(record, f"profiles[{label!r}]")
        if wrong:
            raise _broken(path, wrong)
    return Baseline(
        path=path,
        test_id=str(data["test"]),
        fingerprint=str(data["fingerprint"]),
        profiles={label: GateRecord.from_json(record) for label, record in profiles.items()},
        target=dict(data.get("target") or {}),
        recorded=dict(data.get("recorded") or {}),
    )


def write(baseline: Baseline) -> Path:
    """Write atomically: a temporary file in the same folder, then os.replace over the old one.

    The file gets the mode any new file in the checkout gets (0644 under the usual umask), not the
    temporary file's private 0600. A file someone made read-only is refused, not replaced.
    """
    path = Path(baseline.path)
    mode = read_only_mode(path) if path.is_file() else None
    if mode is not None:
        raise BaselineError(
            f"baseline {path} is read-only (mode {mode:04o}), so it is not updated: make it "
            f"writable (chmod u+w {shlex.quote(str(path))}) to record it again, or leave its test "
            "out of the update (-k)"
        )
    # its own folder; a folder still to be created is under the baselines folder, which the session checked before
    # the first test (writable_folders.check_writable), not a parent such as /root (0550 on some systems)
    folder = path.parent
    root = folder.parent
    if root.is_symlink():  # the baselines folder itself (issue 64): a committed link takes every update with it
        raise BaselineError(
            f"baseline {path} is not written: the baselines folder {root} is a symbolic link (to "
            f"{os.readlink(root)}), and pytest-sme2 never writes baselines through a link, which can lead out of "
            f"the repository. Replace it by a real folder (rm {shlex.quote(str(root))}), or, if you mean that "
            f"folder, point --sme2-baselines-dir at its real path ({os.path.realpath(root)})"
        )
    if folder.is_symlink():  # a link a pull request committed there would take the update anywhere on disk
        raise BaselineError(
            f"baseline {path} is not written: its folder {folder} is a symbolic link (to "
            f"{os.readlink(folder)}), and pytest-sme2 never writes baselines through a link, which "
            f"can lead out of the repository. Replace it by a real folder (rm "
            f"{shlex.quote(str(folder))}) and record again, or point --sme2-baselines-dir at the "
            "folder you mean"
        )
    mode = read_only_mode(folder) if folder.is_dir() else None
    if mode is not None:
        raise BaselineError(
            f"baseline {path} is not written: its folder {folder} is read-only (mode {mode:04o}); "
            f"make it writable (chmod u+w {shlex.quote(str(folder))}) to record it, or leave its "
            "test out of the update (-k)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(baseline.as_dict())
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_umask())
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process umask (reading it means setting it; set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


NO_COMMIT_YET, NO_REPOSITORY = baseline_schema.GIT_STATES


def git_state(directory: Path) -> str | None:
    """Why ``directory`` has no commit to name: ``NO_COMMIT_YET`` (a repository without commits),
    ``NO_REPOSITORY``, or None when it has one or git cannot tell (so a report never says "commit ?")."""
    if git_commit(directory) is not None:
        return None
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"], cwd=directory, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return NO_COMMIT_YET if result.returncode == 0 and result.stdout.strip() == "true" else NO_REPOSITORY


def recorded_now(directory: Path) -> dict[str, Any]:
    """Date and git commit of a baseline recorded now, or why there is no commit (``git``)."""
    recorded: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(directory),
    }
    state = None if recorded["git_commit"] else git_state(directory)
    if state:
        recorded["git"] = state
    return recorded


def recorded_text(recorded: Mapping[str, Any]) -> str:
    """``recorded DATE at commit abc123`` or, without a commit, why: ``before the first commit``,
    ``outside a git repository``, or (files that did not say) ``at no known commit``.

    The date and commit come from the baseline file, which anyone with a pull request can edit: load refuses
    any that is not a timestamp or a commit, and they are kept on one line here too (one_line), so that no
    caller's record can start a line of the failure message (a workflow command under GitHub Actions)."""
    date = one_line(recorded.get("date") or "at an unknown date")
    commit = recorded.get("git_commit")
    if commit:
        return f"recorded {date} at commit {one_line(str(commit)[:12])}"
    state = recorded.get("git")
    return f"recorded {date} {state if state in (NO_COMMIT_YET, NO_REPOSITORY) else 'at no known commit'}"


def stored(root: Path, fingerprint: str) -> Iterable[Path]:
    """Every baseline file of one target fingerprint (for the unused-baselines report)."""
    folder = Path(root) / slug(fingerprint)
    return sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []


def stored_test_id(path: Path) -> str | None:
    """The test id a stored file belongs to (None if it cannot be read; load() says why)."""
    try:
        text = read(Path(path))
        data = json.loads(text) if text is not None else None
    except (BaselineError, ValueError, RecursionError):
        return None
    return data.get("test") if isinstance(data, dict) else None
