"""The baseline store: paths, schema, stable formatting, atomic concurrent writes, clear errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import BaselineError
from pytest_sme2.evidence.etdump import read_run
from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump
from pytest_sme2.gate import baselines
from pytest_sme2.gate.gate import auto_replicas
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances
from pytest_sme2.profile.profile import Profile


def _record(samples: list[float]) -> dict:
    return {
        "latency": {"median_ms": sorted(samples)[len(samples) // 2]},
        "samples_ms": samples,
        "shares": {"CONV": 0.5, "OTHER": 0.5},
    }


def _baseline(
    path: Path, test_id: str = "tests/test_x.py::test_a", samples: list[float] | None = None
) -> baselines.Baseline:
    return baselines.Baseline(
        path,
        test_id,
        "host-x86_64-cpu-nosme2",
        {"m fp32 [host]": GateRecord.from_json(_record(samples or [1.0, 2.0]))},
        {"name": "host", "cpu": "cpu", "details": {"runner": "/tmp/x"}},
        {"date": "2026-01-01T00:00:00Z"},
    )


def test_path_is_per_fingerprint_and_test_and_long_ids_stay_distinct(tmp_path: Path) -> None:
    path = baselines.baseline_path(tmp_path, "host-x86_64-amd-epyc-nosme2", "perf_tests/test_a.py::test_b[x y]")
    assert path.parent == tmp_path / "host-x86_64-amd-epyc-nosme2"
    assert re.fullmatch(r"perf_tests_test_a\.py_test_b_x_y~[0-9a-f]{12}\.json", path.name)
    long_a = "t.py::test_" + "a" * 200 + "[1]"
    long_b = "t.py::test_" + "a" * 200 + "[2]"
    path_a, path_b = (baselines.baseline_path(tmp_path, "fp", t) for t in (long_a, long_b))
    assert path_a != path_b and len(path_a.name) < 130


@pytest.mark.parametrize(
    "pair",
    [
        ("t.py::test_weird[a/b]", "t.py::test_weird[a_b]"),
        ("t.py::test[$(touch x)]", "t.py::test[`touch x`]"),
        ("t.py::test[..]", "t.py::test[__]"),
        ("plain", "plain~" + "0" * 12),
    ],
)
def test_ids_that_clean_alike_get_different_files(tmp_path: Path, pair: tuple[str, str]) -> None:
    first, second = (baselines.baseline_path(tmp_path, "fp", test_id) for test_id in pair)
    assert first != second
    assert first.parent == second.parent == tmp_path / "fp"  # nothing escapes the target folder


def test_format_is_stable_sorted_rounded_and_keeps_number_lists_on_one_line(tmp_path: Path) -> None:
    path = baselines.write(_baseline(tmp_path / "a.json", samples=[2.123456789, 1.0000001, 3.5]))
    text = path.read_text()
    assert text.endswith("}\n")
    assert '"samples_ms": [2.12346, 1.0, 3.5]' in text
    data = json.loads(text)
    assert list(data) == sorted(data) and data["schema"] == baselines.SCHEMA_VERSION
    assert "details" not in data["target"]  # machine-local paths stay out of the file
    # writing the loaded baseline again gives byte-identical text
    again = baselines.load(path)
    baselines.write(again)
    assert path.read_text() == text


def test_load_round_trip_and_missing_file_is_none(tmp_path: Path) -> None:
    path = baselines.write(_baseline(tmp_path / "fp" / "t.json"))
    loaded = baselines.load(path)
    assert loaded.test_id == "tests/test_x.py::test_a" and loaded.profiles["m fp32 [host]"].samples_ms == [1.0, 2.0]
    assert baselines.load(tmp_path / "nope.json") is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"schema": 1, "test": ', "not valid JSON (Expecting value at line 1 column 23)"),
        ("[1, 2]", "the top level is not a JSON object"),
        (
            '{"schema": 99, "test": "t", "fingerprint": "f", "profiles": {}}',
            "schema 99, this pytest-sme2 reads schemas 1, 2",
        ),
        ('{"schema": 1, "test": "t", "profiles": {}}', "missing key(s) fingerprint"),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}}}}',
            "profiles['a'] has no 'samples_ms'",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1, "x"]}}}',
            "profiles['a'].samples_ms must be a list of numbers >= 0 (ms per run) (it is list [1, 'x'])",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": []}}}',
            "profiles['a'].samples_ms is empty (only an emulated record has no timed runs)",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1, 2], "reference_ms": [3]}}}',
            "profiles['a'].reference_ms has 1 entries, one per entry of 'samples_ms' (2) expected",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "reference_ms": [0]}}}',
            "profiles['a'].reference_ms must be null or a list of numbers > 0",
        ),
        # A right schema with wrong inner types (issue 13, case 3): named by field, never a traceback later.
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": "abc", "samples_ms": [1]}}}',
            "profiles['a'].shares must be an object of named values (it is str 'abc')",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": [], "shares": {}, "samples_ms": [1]}}}',
            "profiles['a'].latency must be null or an object of statistics",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {"CONV": "half"}, "samples_ms": [1]}}}',
            "profiles['a'].shares['CONV'] must be a share (a number, 0.25 for 25%) or null (it is str 'half')",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "per_run": {"shares": {"CONV": 0.5}}}}}',
            "profiles['a'].per_run.shares['CONV'] must be null or a list of shares, one per run",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "delegation_coverage": 1.5}}}',
            "profiles['a'].delegation_coverage must be a fraction between 0 and 1, or null (it is float 1.5)",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "delegation": {"ops": {"aten.add": [1]}}}}}',
            "profiles['a'].delegation.ops['aten.add'] must be [delegated, not delegated]",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": null, "shares": {}, "samples_ms": [], "emulated": true, '
            '"instructions": {"source": "qemu (emulated target)", "ops": {"Convolution @3": [0, 100]}}}}}',
            "profiles['a'].instructions.ops['Convolution @3'] must be [execution order, instructions, SME instructions]",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "portable_ops": "aten.add"}}}',
            "profiles['a'].portable_ops must be a list of strings (it is str 'aten.add')",
        ),
        (
            '{"schema": 1, "test": "t", "fingerprint": "f", "profiles": {"a": {"latency": {}, "shares": {}, "samples_ms": [1], "memory": {"planned_bytes": -4}}}}',
            "profiles['a'].memory.planned_bytes must be a whole number >= 0 or null (it is int -4)",
        ),
        ('{"schema": 1, "test": 7, "fingerprint": "f", "profiles": {}}', "'test' must be a string (it is int)"),
    ],
)
def test_broken_files_are_clear_errors_naming_the_file(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(BaselineError) as info:
        baselines.load(path)
    message = str(info.value)
    assert str(path) in message and why in message and "--sme2-update-baselines" in message
    assert path.read_text() == text  # loading never rewrites


def _write_many(args: tuple[str, int]) -> None:
    root, worker = args
    for i in range(20):
        test_id = f"t.py::test_{worker}_{i}"
        baselines.write(_baseline(baselines.baseline_path(Path(root), "fp", test_id), test_id, [float(i), 1.0]))
        baselines.write(
            _baseline(
                baselines.baseline_path(Path(root), "fp", "t.py::shared"), "t.py::shared", [float(worker), float(i)]
            )
        )


def test_concurrent_writers_lose_nothing_and_never_leave_half_files(tmp_path: Path) -> None:
    # spawn, not fork: a child forked from this multi-threaded pytest worker (torch's and execnet's threads) once
    # hung on a lock held at the fork for 21 minutes in CI's `make test`
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_write_many, [(str(tmp_path), w) for w in range(4)])
    files = sorted((tmp_path / "fp").glob("*.json"))
    assert len(files) == 4 * 20 + 1
    for path in files:
        assert baselines.load(path) is not None  # every file complete and valid
    assert not list(tmp_path.rglob("*.tmp"))


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = baselines.write(_baseline(tmp_path / "b.json"))
    before = path.read_text()
    broken = _baseline(path)
    broken.profiles["m fp32 [host]"] = replace(broken.profiles["m fp32 [host]"], samples_ms=[object()])
    with pytest.raises(TypeError):
        baselines.write(broken)
    assert path.read_text() == before and not list(tmp_path.glob("*.tmp"))


def test_a_fingerprint_folder_that_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    """A baselines folder whose fingerprint folder is a link (committed by anyone with a pull request) to a folder
    outside the repository: the update is refused naming the link and the fix, and nothing is written there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "repo" / "baselines"
    root.mkdir(parents=True)
    path = baselines.baseline_path(root, "fp", "t.py::t")
    path.parent.symlink_to(outside)
    with pytest.raises(
        BaselineError,
        match=rf"its folder {re.escape(str(path.parent))} is a symbolic link \(to "
        rf"{re.escape(str(outside))}\).*Replace it by a real folder",
    ):
        baselines.write(_baseline(path))
    assert not list(outside.iterdir())


def test_record_of_a_real_profile(tmp_path: Path) -> None:
    runs = []
    for r in range(3):
        t0 = r * 10_000_000
        runs.append(
            (
                "Execute",
                [
                    SyntheticEvent(t0 + 100_000, t0 + 600_000, delegate_name="Convolution (NHWC, PF32) IGEMM #1"),
                    SyntheticEvent(t0, t0 + 700_000, name="DELEGATE_CALL", instruction_id=0),
                    SyntheticEvent(t0 + 700_000, t0 + 900_000, name="native_call_where.self_out", instruction_id=1),
                    SyntheticEvent(t0 + 700_000, t0 + 900_000, name="OPERATOR_CALL", instruction_id=1),
                    SyntheticEvent(t0, t0 + 1_000_000, name="Method::execute"),
                ],
            )
        )
    trace = read_run(write_synthetic_etdump(tmp_path / "t.etdp", runs))
    profile = Profile(
        trace,
        model="m",
        recipe="fp32-xnnpack",
        variant="host",
        delegation={
            "delegated_nodes": 3,
            "non_delegated_nodes": 1,
            "delegated_subgraphs": 1,
            "ops": [{"op_type": "aten.where.self", "delegated": 0, "non_delegated": 1}],
        },
        metadata={"run": {"runs": 3}, "export": {"torch": "2.13.0"}},
    )
    record = baselines.record_of(profile, {"per_inference": 10.0}).to_json()
    assert record["samples_ms"] == [1.0, 1.0, 1.0] and record["reference_ms"] is None
    referenced = Profile(
        trace, model="m", recipe="fp32-xnnpack", variant="host", reference_ms=np.array([2.0, 4.0, 0.5])
    )
    assert baselines.record_of(referenced).reference_ms == [2.0, 4.0, 0.5]
    assert list(referenced.relative_ms) == [0.5, 0.25, 2.0]
    assert referenced.to_dict()["relative_latency"]["median"] == 0.5
    assert record["delegation_coverage"] == pytest.approx(0.7)
    # One serialisation: what the record keeps is what the report entry says, under the same names.
    entry = profile.to_dict()
    shared = set(record) & set(entry) - {"portable_ops", "memory", "instructions"}
    assert shared >= {"latency", "shares", "per_run", "replica_sizes", "delegation", "reference_ms"}
    assert {key: record[key] for key in shared} == {key: entry[key] for key in shared}
    assert record["portable_ops"] == [op["op"] for op in entry["portable_ops"]] == ["native_call_where.self_out"]
    assert record["portable_ops"] == ["native_call_where.self_out"]
    assert record["delegation"]["ops"] == {"aten.where.self": [0, 1]}
    assert record["sme_path_share"] == 1.0 and record["instructions"] == {
        "source": "callgrind (host)",
        "per_inference": 10.0,
    }
    assert record["provenance"] == {"torch": "2.13.0"}
    json.loads(baselines.dumps(record))  # serialisable as is


def test_every_committed_baseline_loads_and_is_at_its_tests_name() -> None:
    """The repository's own baselines pass the field checks and sit where their test looks for them."""
    root = Path(__file__).resolve().parents[2] / "baselines"
    files = sorted(root.rglob(f"*{baselines.SUFFIX}"))
    assert files, f"no committed baselines under {root}"
    for path in files:
        stored = baselines.load(path)
        assert stored is not None and stored.profiles
        assert baselines.baseline_path(root, stored.fingerprint, stored.test_id) == path
        # read into the typed record and written back, a committed file is byte for byte what it was; a file of
        # format 1 (written before the replica names) comes back as format 2, differing only there
        assert baselines.dumps(stored.as_dict()) == baselines.dumps(_in_format_2(json.loads(path.read_text())))


# What format 2 renamed in a record (issue 67), written out here rather than taken from gate/record.py, so that a
# wrong mapping there fails the round trip above.
_RENAMED_IN_2 = {
    ("process_sizes",): "replica_sizes",
    ("run", "processes"): "replicas",
    ("quality", "processes"): "replicas",
    ("quality", "check_processes"): "check_replicas",
    ("quality", "between_processes"): "between_replicas",
}


def _in_format_2(data: dict) -> dict:
    """A baseline file's JSON as format 2 writes it: the version, and format 1's renamed record keys."""
    if data["schema"] == 1:
        data["schema"] = 2
        for record in data["profiles"].values():
            for (*parents, old), new in _RENAMED_IN_2.items():
                holder = record
                for key in parents:
                    holder = holder.get(key) if isinstance(holder, dict) else None
                if isinstance(holder, dict) and old in holder:
                    holder[new] = holder.pop(old)
    return data


def test_a_baseline_without_a_commit_says_why_instead_of_commit_question_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: ``recorded ... at commit ?`` for baselines recorded before the first commit."""
    import shutil
    import subprocess

    from pytest_sme2.gate.baselines import recorded_now, recorded_text

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    outside = tmp_path / "plain"
    outside.mkdir()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    subprocess.run(["git", "init", "-q", str(fresh)], check=True)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # tmp_path might sit inside some repository
    unborn, plain = recorded_now(fresh), recorded_now(outside)
    assert recorded_text(unborn) == f"recorded {unborn['date']} before the first commit"
    assert recorded_text(plain) == f"recorded {plain['date']} outside a git repository"
    assert (
        recorded_text({"date": "2026-01-01", "git_commit": "0123456789abcdef"})
        == "recorded 2026-01-01 at commit 0123456789ab"
    )
    assert "?" not in recorded_text({"date": "2026-01-01", "git_commit": None})  # files written before this


# A baseline field as an attacker with write access to the file (a pull request) would set it: GitHub runs every
# output line that starts with ``::`` as a workflow command.
FORGED = "\n::error file=evil.py,line=1::FORGED\n::stop-commands::tok"
_COMMITTED = (
    Path(__file__).parents[2]
    / "baselines"
    / "emulated-aarch64-qemu-aarch64-cpu-max-svl-512-sme2"
    / "perf_tests_test_toy_cnn.py_test_toy_cnn_sme2_kernel_path_int8~20e50bb6c2d7.json"
)


def _forgeries(value: object, path: tuple = ()) -> list[tuple[tuple, str]]:
    """Where a forged string can go: (path, "value") for every string value, (path, "key") for every object key."""
    if isinstance(value, str):
        return [(path, "value")]
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _forgeries(item, (*path, i))]
    if isinstance(value, dict):
        return [
            found for key, item in value.items() for found in [((*path, key), "key"), *_forgeries(item, (*path, key))]
        ]
    return []


def _forged(data: dict, path: tuple, kind: str) -> dict:
    """A copy of ``data`` with the string at ``path`` (a value, or the key naming it) followed by FORGED."""
    copy = json.loads(json.dumps(data))
    *parent_path, last = path
    parent = copy
    for step in parent_path:
        parent = parent[step]
    if kind == "value":
        parent[last] = parent[last] + FORGED
    else:
        parent[last + FORGED] = parent.pop(last)
    return copy


def test_every_string_field_of_a_baseline_refuses_a_forged_line_and_names_it(tmp_path: Path) -> None:
    data = json.loads(_COMMITTED.read_text())
    data["recorded"]["git"] = baselines.NO_COMMIT_YET  # the field of a file recorded without a commit, forged too
    places = _forgeries(data)
    assert len(places) > 200  # the committed file's every label, op, kernel, recipe and provenance string
    path = tmp_path / "forged.json"
    for where, kind in places:
        path.write_text(json.dumps(_forged(data, where, kind)))
        with pytest.raises(BaselineError) as info:
            baselines.load(path)
        message = str(info.value)
        assert "\n" not in message and str(path) in message, (where, kind, message)
        assert "control character" in message or "must be" in message, (where, kind, message)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("date", "yesterday", "recorded.date must be a UTC timestamp like 2026-01-31T12:00:00Z"),
        ("git_commit", "main", "recorded.git_commit must be a git commit (7 to 64 hexadecimal digits) or null"),
        ("git", "anywhere", "recorded.git must be null, 'before the first commit' or 'outside a git repository'"),
    ],
)
def test_recorded_fields_must_be_a_timestamp_a_commit_and_a_known_state(
    tmp_path: Path, field: str, value: str, why: str
) -> None:
    data = json.loads(_COMMITTED.read_text())
    data["recorded"][field] = value
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=re.escape(why)):
        baselines.load(path)


def test_recorded_text_keeps_a_forged_date_and_commit_on_one_line() -> None:
    """The escaping where the text is written, for a record that never went through load (a caller's dict)."""
    text = baselines.recorded_text({"date": "2026-01-01T00:00:00Z" + FORGED, "git_commit": "abc" + FORGED})
    assert "\n" not in text and "::error" in text  # shown as characters, not as a line of its own
    text = baselines.recorded_text({"date": "\x1b[2J" + FORGED, "git": FORGED})
    assert "\n" not in text and "\x1b" not in text


def test_a_baseline_that_is_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    """Issue 64 (bad 4): a FIFO at a baseline's name hung the session forever in the setup hook
    (auto_replicas -> load -> read_text), printing nothing. Refused by its kind, naming it and the fix."""
    path = baselines.baseline_path(tmp_path, "fp", "t.py::t")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(BaselineError, match=rf"baseline {re.escape(str(path))} cannot be used: it is a FIFO"):
        baselines.load(path)
    assert baselines.stored_test_id(path) is None
    assert auto_replicas(tmp_path, "fp", "t.py::t", Tolerances()) == 1


def test_a_baseline_linked_to_dev_zero_or_out_of_the_folder_is_refused_before_a_byte_is_read(
    tmp_path: Path,
) -> None:
    """Issue 64 (bad 5): a committed link to /dev/zero read until memory ran out; a link to a file outside the
    baselines folder is refused too (a pull request can commit either)."""
    root = tmp_path / "baselines"
    zero = baselines.baseline_path(root, "fp", "t.py::zero")
    zero.parent.mkdir(parents=True)
    zero.symlink_to("/dev/zero")
    with pytest.raises(BaselineError, match=r"it is a link to /dev/zero, out of .*baselines.*--sme2-update-baselines"):
        baselines.load(zero)
    elsewhere = tmp_path / "elsewhere.json"
    baselines.write(_baseline(elsewhere, "t.py::away"))
    away = baselines.baseline_path(root, "fp", "t.py::away")
    away.symlink_to(elsewhere)
    with pytest.raises(BaselineError, match=rf"it is a link to {re.escape(str(elsewhere))}, out of"):
        baselines.load(away)


def test_a_baseline_larger_than_a_baseline_can_be_is_refused_by_its_size(tmp_path: Path) -> None:
    path = baselines.baseline_path(tmp_path, "fp", "t.py::t")
    path.parent.mkdir(parents=True)
    with open(path, "wb") as out:
        out.truncate(2 << 30)  # sparse: 2 GiB on paper, nothing on disk
    with pytest.raises(BaselineError, match=r"it is 2 GiB, above the 64 MiB a baseline file can be"):
        baselines.load(path)


def test_a_baselines_folder_that_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    """Issue 64 (weak): baselines/ itself a link out of the repository; updates were written through it (the fix
    of issue 52 checked only the fingerprint folder). Its real path, given as the folder, is written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "repo" / "baselines"
    root.parent.mkdir()
    root.symlink_to(outside)
    path = baselines.baseline_path(root, "fp", "t.py::t")
    with pytest.raises(
        BaselineError,
        match=rf"the baselines folder {re.escape(str(root))} is a symbolic link \(to {re.escape(str(outside))}\).*"
        rf"point --sme2-baselines-dir at its real path \({re.escape(str(outside))}\)",
    ):
        baselines.write(_baseline(path))
    assert not list(outside.iterdir())
    assert baselines.write(_baseline(baselines.baseline_path(outside, "fp", "t.py::t"))).is_file()
