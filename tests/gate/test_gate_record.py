"""The gate record's one declaration (gate/record.py): a loaded record is checked from it field by field, read
into it and written back as it was."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import BaselineError
from pytest_sme2.gate import baselines, gate
from pytest_sme2.gate.record import RECORD_VERSION, Counts, GateRecord, upgraded
from pytest_sme2.gate.record_fields import Object, Part

GOOD: dict[str, Any] = {
    "latency": {"median_ms": 1.5},
    "samples_ms": [1.0, 2.0],
    "shares": {"CONV": 0.5, "OTHER": 0.5},
    "replica_sizes": [2],
    "memory": {"planned_bytes": 4096, "planned_buffers": [4096], "peak_rss_kb": None},
    "instructions": {"source": "qemu (emulated target)", "per_inference": 10, "ops": {"Add @1": [0, 10, 0]}},
}


def _file(tmp_path: Path, record: dict[str, Any]) -> Path:
    path = tmp_path / "fp" / "t.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": RECORD_VERSION, "test": "t.py::t", "fingerprint": "fp", "profiles": {"m": record}}
    path.write_text(json.dumps(data))
    return path


def test_a_good_record_passes_and_reads_into_typed_attributes() -> None:
    assert GateRecord.problem(GOOD, "r") is None
    record = GateRecord.from_json(GOOD)
    assert record.samples_ms == [1.0, 2.0] and record.replica_sizes == [2]
    assert record.memory is not None and record.memory.planned_bytes == 4096
    assert isinstance(record.instructions, Counts) and record.instructions.ops == {"Add @1": [0, 10, 0]}
    assert record.counts is record.instructions  # qemu's: the counted checks read it


@pytest.mark.parametrize("missing", ["latency", "samples_ms", "shares"])
def test_a_missing_required_field_is_named(missing: str) -> None:
    record = {key: value for key, value in GOOD.items() if key != missing}
    assert GateRecord.problem(record, "profiles['m']") == f"profiles['m'] has no {missing!r}"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("replica_sizes", [2, "x"], "profiles['m'].replica_sizes must be null or a list of runs per replica"),
        ("memory", {"planned_bytes": -1}, "profiles['m'].memory.planned_bytes must be a whole number >= 0 or null"),
        ("memory", [], "profiles['m'].memory must be an object or null (it is list [])"),
        ("emulated", "yes", "profiles['m'].emulated must be true, false or null (it is str 'yes')"),
        ("instructions", {"load": 1.5}, "profiles['m'].instructions.load must be a whole number >= 0 or null"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_what_it_must_be(field: str, value: Any, says: str) -> None:
    found = GateRecord.problem({**GOOD, field: value}, "profiles['m']")
    assert found is not None and found.startswith(says), found


def test_every_declared_field_is_checked() -> None:
    """No field of the declaration loads unchecked: a value no shape accepts (a set) is refused under each one's
    name, nested parts included."""

    def paths(part: type[Part]) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for f in part.declared_fields():
            out.append((f.name,))
            shape = f.metadata["shape"]
            if isinstance(shape, Object):
                out += [(f.name, *sub) for sub in paths(shape.part)]
        return out

    checked = paths(GateRecord)
    assert ("replica_sizes",) in checked and ("instructions", "mix") in checked
    for path in checked:
        record: dict[str, Any] = json.loads(json.dumps(GOOD))
        at = record
        for key in path[:-1]:
            if not isinstance(at.get(key), dict):
                at[key] = {}
            at = at[key]
        at[path[-1]] = {1, 2}
        found = GateRecord.problem(record, "r")
        assert found is not None and found.startswith(f"r.{'.'.join(path)} must be "), (path, found)


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ({**GOOD, "latncy": {"median_ms": 1.0}}, "profiles['m'] has 'latncy', which is no field of a profile record"),
        (
            {**GOOD, "memory": {"planned_bytes": 1, "peak": 3}},
            "profiles['m'].memory has 'peak', which is no field of a record's memory",
        ),
    ],
)
def test_an_unknown_field_is_refused_naming_the_file_the_field_and_the_fix(
    tmp_path: Path, record: dict[str, Any], says: str
) -> None:
    path = _file(tmp_path, record)
    with pytest.raises(BaselineError) as raised:
        baselines.load(path)
    message = str(raised.value)
    assert message.startswith(f"baseline {path} cannot be used: {says}"), message
    assert "remove it" in message and "--sme2-update-baselines" in message


def test_a_wrong_type_in_a_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = _file(tmp_path, {**GOOD, "replica_sizes": "two"})
    with pytest.raises(BaselineError, match=r"cannot be used: profiles\['m'\]\.replica_sizes must be null or a list"):
        baselines.load(path)


def test_a_read_record_is_written_back_with_the_keys_it_had() -> None:
    """Older files lack newer fields, and callgrind's counts have other keys than qemu's: neither gains a key by
    being read and written again (committed files round-trip byte for byte: test_baselines.py)."""
    old = {"latency": None, "samples_ms": [1.0], "shares": {}, "instructions": {"source": "callgrind (host)"}}
    assert GateRecord.from_json(old).to_json() == old
    built = GateRecord(samples_ms=[1.0])  # built in code: every always-written field, none of the optional ones
    written = built.to_json()
    assert written["replica_sizes"] is None and "instructions" not in written and "quality" not in written
    assert dataclasses.replace(built, quality={"auto": True}).to_json()["quality"] == {"auto": True}


V1_RECORD: dict[str, Any] = {
    **{key: value for key, value in GOOD.items() if key != "replica_sizes"},
    "process_sizes": [2],
    "run": {"processes": 1, "runs": 2},
    "quality": {"processes": 3, "check_processes": 2, "between_processes": {"latency": 0.01}},
}


def test_a_baseline_of_format_1_reads_under_the_replica_names_and_is_written_as_format_2(tmp_path: Path) -> None:
    """Issue 67 renamed the gate's process keys to replica ones (RECORD_VERSION 2); stored baselines keep working."""
    path = tmp_path / "fp" / "t.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": 1, "test": "t.py::t", "fingerprint": "fp", "profiles": {"m": V1_RECORD}}))
    stored = baselines.load(path)
    assert stored is not None
    record = stored.profiles["m"]
    assert record.replica_sizes == [2] and record.run == {"replicas": 1, "runs": 2}
    assert record.quality == {"replicas": 3, "check_replicas": 2, "between_replicas": {"latency": 0.01}}
    written = json.loads(baselines.dumps(stored.as_dict()))
    assert written["schema"] == RECORD_VERSION == 2 and "process_sizes" not in written["profiles"]["m"]
    assert upgraded(V1_RECORD, 1)["replica_sizes"] == [2] and upgraded(V1_RECORD, 2) == V1_RECORD
    assert V1_RECORD["run"] == {"processes": 1, "runs": 2}  # the caller's data is kept


def test_a_format_2_baseline_with_a_format_1_key_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"process_sizes"):
        baselines.load(_file(tmp_path, V1_RECORD))


def test_a_summary_of_an_older_pytest_sme2_is_judged_under_the_replica_names() -> None:
    """A session's summary.json written before RECORD_VERSION 2 has no record_version: format 1 (pytest-sme2 check)."""
    old = {"rules": {"check_processes": 3, "metric": "latency"}, "files": [{"records": {"m": V1_RECORD}}]}
    assert gate.gate_input_problem(old, "tests[0].gate") is None
    current = gate.current_gate_input(old)
    assert current["record_version"] == RECORD_VERSION and current["rules"] == {
        "check_replicas": 3,
        "metric": "latency",
    }
    assert current["files"][0]["records"]["m"]["replica_sizes"] == [2]
    assert gate.current_gate_input(current) == current  # format 2 as it is
